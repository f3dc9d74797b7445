"""A whole PyTorch DDP training script, as a user would run one: ``python -m
benchmarks.ddp_script --steps N`` trains the reference MLP data-parallel on 2 processes
(gloo) for N steps and prints its figures as JSON; the ``e2e`` suite times the whole process.
"""

from __future__ import annotations

import argparse
import json

from benchmarks.ddp_reference import DDPSettings, run_ddp


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ddp_script")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    settings = DDPSettings(
        processes=args.processes, global_batch=args.batch_size, steps=args.steps, warmup=0
    )
    print(json.dumps(run_ddp(settings)))


if __name__ == "__main__":
    main()
