"""A whole PyTorch RPC parameter-server training script, as a user would run one: ``python -m
benchmarks.ps_script --steps N --mode sync`` trains the reference MLP with a server and 2
trainers (``torch.distributed.rpc``) for N steps and prints its figures as JSON; the ``e2e``
suite times the whole process.
"""

from __future__ import annotations

import argparse
import json

from benchmarks.ps_reference import MODES, ParameterServerSettings, run_torch_parameter_server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ps_script")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--mode", choices=MODES, default="sync")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    settings = ParameterServerSettings(
        workers=args.workers,
        mode=args.mode,
        global_batch=args.batch_size,
        steps=args.steps,
        warmup=0,
    )
    print(json.dumps(run_torch_parameter_server(settings)))


if __name__ == "__main__":
    main()
