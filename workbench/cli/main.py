"""``dtrain``: the headless command line (``dtrain run``, ``dtrain plan``, ``dtrain bench``,
``dtrain doctor``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.config import RunConfig
    from workbench.launch.flags import PlanRequest
    from workbench.launch.runner import PreparedRun, RunResult

COMMANDS = ("run", "plan", "calibrate", "bench", "export", "doctor", "gc")

# Each command imports what it runs (the engine, Dask, the run store) after its flags parse, so
# --help, --version and a mistyped flag or value answer without them.

USAGE = """usage: dtrain <command> [flags]      dtrain --version

commands:
  run     train a model with a parallel strategy (dtrain run --help)
  plan    show how the master places and partitions the run's client graph (same flags);
          --what-if: predict every strategy and device mesh for this model, batch and
          cluster, ranked, with its peak memory per device (--memory-per-device SIZE marks
          what does not fit; --what-if-top K shows the best K)
  calibrate  time the devices, links and dispatch of the run's cluster (cached)
  bench   from a source checkout: the benchmark suites (python -m benchmarks --help)
  export  write a stored run's events for other tools: --tensorboard DIR RUN_ID
  doctor  report this machine's (and each worker's) packages and GPUs, and smoke-run every
          strategy on the devices found (dtrain doctor --help)
  gc      remove what this user's crashed runs left on this host (shared memory, scratch
          directories) and mark their records lost
"""


def run_command(argv: Sequence[str]) -> int:
    from workbench.launch.errors import USER_ERRORS
    from workbench.launch.flags import parse_run_flags

    try:
        config = parse_run_flags(argv)
    except USER_ERRORS as error:
        print(f"dtrain run: error: {error}", file=sys.stderr)
        return 2

    from workbench.launch.runner import prepare_run
    from workbench.parallel.dispatch import DeviceFailure
    from workbench.runtime.cluster import ClusterError
    from workbench.safe_io import strict_dumps

    try:
        prepared = prepare_run(config)  # every input error before anything starts or is stored
        result = _train_recorded(prepared)
    except (*USER_ERRORS, ClusterError) as error:
        print(f"dtrain run: error: {error}", file=sys.stderr)
        return 2
    except DeviceFailure as error:
        print(f"dtrain run: a device failed: {error}", file=sys.stderr)
        return 1
    except MemoryError as error:
        print(f"dtrain run: out of memory: {error or 'an allocation failed'}", file=sys.stderr)
        return 1

    if config.json:
        print(strict_dumps(result.summary, indent=2))
    return 0


def _train_recorded(prepared: PreparedRun) -> RunResult:
    """Train a prepared run, recorded in the run store as it goes (so the JupyterLab sidebar
    lists it, shows its charts and can stop it)."""
    from workbench.events import EventLog
    from workbench.launch.run_link import RunLink, new_run_id
    from workbench.launch.runner import stderr_progress
    from workbench.store import RunStore

    store = RunStore()
    run_id = new_run_id(prepared.config.strategy)
    link = RunLink(store, run_id, prepared.job, EventLog()).start()
    stderr_progress(f"[dtrain] run {run_id}, recorded in {store.root}")
    return link.train(prepared, stderr_progress)


def plan_command(argv: Sequence[str]) -> int:
    """Print the placement, the partitions and the Send/Recv pairs, without starting anything;
    with ``--what-if``, the ranked predictions of every strategy."""
    from workbench.launch.errors import USER_ERRORS
    from workbench.launch.flags import parse_plan_flags

    try:
        config, request = parse_plan_flags(argv)
    except USER_ERRORS as error:
        print(f"dtrain plan: error: {error}", file=sys.stderr)
        return 2
    if request.what_if:
        return _what_if(config, request)

    from workbench.data import load_dataset
    from workbench.launch.graph_plans import graph_plan
    from workbench.launch.machine_limits import build_checked_model

    try:
        dataset = load_dataset(config.dataset, seed=config.seed)
        model = build_checked_model(config, dataset.input_shape, dataset.num_classes, 1)
        plan = graph_plan(config, model)
    except USER_ERRORS as error:
        print(f"dtrain plan: error: {error}", file=sys.stderr)
        return 2
    print(model.summary())
    print(plan.describe())
    return 0


def _what_if(config: RunConfig, request: PlanRequest) -> int:
    from workbench.launch.errors import USER_ERRORS
    from workbench.launch.what_if import plan_what_if
    from workbench.planner.what_if import (
        format_table,
        left_out_summary,
        memory_summary,
        top_rows,
    )
    from workbench.runtime.cluster import ClusterError
    from workbench.safe_io import strict_dumps

    try:
        plan = plan_what_if(
            config,
            request.what_if_cluster,
            _stderr_progress,  # the run's own (launch.runner) would load the training stack
            request.memory_per_device,
            request.what_if_top,
        )
    except (*USER_ERRORS, ClusterError) as error:
        print(f"dtrain plan: error: {error}", file=sys.stderr)
        return 2
    shown = top_rows(plan.rows, plan.top)
    if config.json:
        configurations = [row.to_dict() for row in shown]
        document = {
            "source": plan.source,
            "memory_per_device": plan.memory_capacity,
            "fitting": sum(row.fits for row in plan.rows if row.prediction is not None),
            "ranked": sum(row.rank is not None for row in plan.rows),
            "top": plan.top,
            "configurations": configurations,
            "meshes_left_out": [
                {"mesh": str(pruned.mesh), "kind": pruned.kind, "reason": pruned.reason}
                for pruned in plan.pruned
            ],
        }
        print(strict_dumps(document, indent=2))
        return 0
    print(f"what if: {config.model}, batch {config.batch_size}, {plan.source}")
    print(format_table(shown))
    print(left_out_summary(plan.rows, shown, plan.pruned))
    print(memory_summary(plan.rows, plan.memory_capacity))
    return 0


def _stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def calibrate_command(argv: Sequence[str]) -> int:
    """Time the cluster ``dtrain run`` would use for this model (nodes at every batch size
    the what-if table needs, links, dispatch), afresh, and cache it in the run store."""
    from workbench.launch.errors import USER_ERRORS
    from workbench.launch.flags import parse_calibrate_flags

    try:
        config = parse_calibrate_flags(argv)
    except USER_ERRORS as error:
        print(f"dtrain calibrate: error: {error}", file=sys.stderr)
        return 2

    from workbench.launch.calibrate import (
        calibrate_cluster,
        calibration_summary,
        model_for,
    )
    from workbench.launch.runner import stderr_progress
    from workbench.runtime.cluster import ClusterError
    from workbench.safe_io import strict_dumps

    try:
        calibrated = calibrate_cluster(config, model_for(config), stderr_progress, fresh=True)
    except (*USER_ERRORS, ClusterError) as error:
        print(f"dtrain calibrate: error: {error}", file=sys.stderr)
        return 2
    summary = calibration_summary(calibrated)
    if config.json:
        print(strict_dumps(summary, indent=2))
    else:
        for key, value in summary.items():
            print(f"{key:<24} {value}")
    return 0


def version() -> str:
    """The installed package's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("dtrain-workbench")
    except PackageNotFoundError:
        return "unknown (the dtrain-workbench package is not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"dtrain {version()}")
        return 0
    command, rest = argv[0], argv[1:]
    if command == "run":
        return run_command(rest)
    if command == "plan":
        return plan_command(rest)
    if command == "calibrate":
        return calibrate_command(rest)
    if command == "bench":
        from workbench.cli.bench_command import bench_command

        return bench_command(rest)
    if command == "export":
        from workbench.cli.export_command import export_command

        return export_command(rest)
    if command == "doctor":
        from workbench.cli.doctor_command import doctor_command

        return doctor_command(rest)
    if command == "gc":
        from workbench.cli.gc_command import gc_command

        return gc_command(rest)
    from workbench.config import unknown_value

    print(f"dtrain: error: {unknown_value('command', command, COMMANDS)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
