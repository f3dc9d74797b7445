"""A whole PyTorch pipelining training script, as a user would run one: ``python -m
benchmarks.pipeline_script --steps N --schedule gpipe`` trains the reference MLP as a 2-stage
pipeline (``torch.distributed.pipelining``, gloo) for N steps and prints its figures as JSON;
the ``e2e`` suite times the whole process.
"""

from __future__ import annotations

import argparse
import json

from benchmarks.pipeline_reference import SCHEDULES, PipelineSettings, run_torch_pipeline


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pipeline_script")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--schedule", choices=SCHEDULES, default="gpipe")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    settings = PipelineSettings(
        schedule=args.schedule,
        microbatches=args.microbatches,
        global_batch=args.batch_size,
        steps=args.steps,
        warmup=0,
    )
    print(json.dumps(run_torch_pipeline(settings)))


if __name__ == "__main__":
    main()
