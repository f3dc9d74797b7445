"""``dtrain``: the headless command line (``dtrain run``, ``dtrain bench``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

USAGE = """usage: dtrain <command> [flags]

commands:
  run     train a model with a parallel strategy (dtrain run --help)
  plan    show how model-parallel places and partitions the graph (same flags as run)
  bench   run the benchmark suites side by side with their peers (dtrain bench --help)
"""


def _user_errors() -> tuple[type[Exception], ...]:
    from workbench.checkpoint import CheckpointError
    from workbench.config import ConfigError
    from workbench.data import DatasetError
    from workbench.models import ModelError
    from workbench.runtime import DeviceError

    return (ConfigError, DatasetError, CheckpointError, DeviceError, ModelError)


def run_command(argv: Sequence[str]) -> int:
    from workbench.cli.flags import parse_run_flags
    from workbench.parallel.dispatch import DeviceFailure
    from workbench.runtime.cluster import ClusterError
    from workbench.training.runner import prepare_run

    try:
        config = parse_run_flags(argv)
        prepared = prepare_run(config)  # every input error before anything starts or is stored
        result = _train_recorded(prepared)
    except (*_user_errors(), ClusterError) as error:
        print(f"dtrain run: error: {error}", file=sys.stderr)
        return 2
    except DeviceFailure as error:
        print(f"dtrain run: a device failed: {error}", file=sys.stderr)
        return 1

    if config.json:
        print(json.dumps(result.summary, indent=2))
    return 0


def _train_recorded(prepared):
    """Train a prepared run, recorded in the run store as it goes (so the JupyterLab sidebar
    lists it, shows its charts and can stop it)."""
    from workbench.events import EventLog
    from workbench.store import RunStore
    from workbench.training.run_link import RunLink, new_run_id
    from workbench.training.runner import stderr_progress

    store = RunStore()
    run_id = new_run_id(prepared.config.strategy)
    link = RunLink(store, run_id, prepared.job, EventLog()).start()
    stderr_progress(f"[dtrain] run {run_id}, recorded in {store.root}")
    return link.train(prepared, stderr_progress)


def plan_command(argv: Sequence[str]) -> int:
    """Print the placement, the partitions and the Send/Recv pairs, without starting anything."""
    from workbench.cli.flags import parse_run_flags
    from workbench.data import load_dataset
    from workbench.models import build_model
    from workbench.optim import make_optimizer
    from workbench.parallel.model_parallel_graph import build_model_parallel_graph
    from workbench.runtime import device_name

    try:
        config = parse_run_flags(argv, prog="dtrain plan")
        dataset = load_dataset(config.dataset, seed=config.seed)
        model = build_model(config.model, dataset.input_shape, dataset.num_classes, config.hidden)
        devices = [device_name("cpu", task=rank) for rank in range(config.devices)]
        plan = build_model_parallel_graph(
            model, make_optimizer(config.optimizer), config.batch_size, config.dtype, devices
        )
    except _user_errors() as error:
        print(f"dtrain plan: error: {error}", file=sys.stderr)
        return 2
    print(model.summary())
    print(plan.describe())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "run":
        return run_command(rest)
    if command == "plan":
        return plan_command(rest)
    if command == "bench":
        from workbench.bench.command import bench_command

        return bench_command(rest)
    print(
        f"dtrain: error: unknown command {command!r}; choose one of: run, plan, bench",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
