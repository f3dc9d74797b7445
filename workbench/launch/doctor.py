"""``dtrain doctor``: what this machine (and each worker of a cluster) has, and whether every
strategy trains on the devices found.

What flows in: a :class:`DoctorRequest` (the flags). What flows out: a :class:`DoctorReport`:
check rows (Python, packages, the GPU runtime, the device type decided, each worker's host, GPU
and versions) and a :class:`SmokeRun` per strategy: three float64 steps of a small MLP on
digits, on one cluster started once (or the user's), pass, fail (with the reason) or skip, and
whether its parameters end where one-device's do (every shape run here is synchronous). No GPU
is not a failure: the CPU path is checked. Nothing is recorded in the run store.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

import numpy as np

from workbench.config import ConfigError, RunConfig
from workbench.launch.runner import run_training
from workbench.runtime.cluster import ClusterTarget, ordered_workers, start_cluster
from workbench.runtime.device_probe import (
    describe_device,
    device_serializers_work,
    nccl_obstacle,
    shared_gpus,
)
from workbench.runtime.gpu_runtime import loaded_runtime, missing_gpu_reason
from workbench.runtime.preflight import installed_versions
from workbench.strategies import STRATEGIES, validate_config
from workbench.strategies.cluster_strategy import ClusterStrategy
from workbench.strategies.validation import resolve_options

Progress = Callable[[str], None]
REQUIRED_PACKAGES = ("workbench", "dask", "distributed", "numpy", "bokeh")
OPTIONAL_PACKAGES = {  # what each is for, said where it is missing
    "cupy": "GPUs",
    "dask_cuda": "local GPU clusters",
    "numba": "--protocol ucx",
    "rmm": "--protocol ucx",
    "distributed_ucxx": "--protocol ucx",
}
TOLERANCE = 1e-9  # float64 parameters against one-device's, relative to each one's largest
SMOKE_STEPS = 3


@dataclass(frozen=True)
class DoctorRequest:
    devices: int = 2  # each distributed strategy's --devices (parameter-server adds its shard)
    device_type: str = "auto"
    share_gpu: bool = False
    cluster: str | None = None
    scheduler_file: str | None = None
    skip_runs: bool = False
    strategies: tuple[str, ...] = ()  # empty: every registered strategy


@dataclass(frozen=True)
class CheckRow:
    check: str
    value: str
    status: str  # ok, warn, fail
    note: str = ""


@dataclass
class SmokeRun:
    label: str
    strategy: str
    devices: int  # the run's --devices
    options: dict[str, Any]
    cluster_devices: int = 0  # the workers it uses (0: it runs in this process)
    device_type: str = "cpu"
    status: str = "skip"  # pass, fail, skip
    seconds: float | None = None
    final_loss: float | None = None
    parameters_match: bool | None = None  # None: not compared (the reference itself, a failure)
    largest_difference: float | None = None  # relative, over every parameter
    reason: str = ""  # why it failed or was skipped (set before training: skipped)
    note: str = ""
    own_cluster: bool = False  # starts a cluster of its own instead of the doctor's


@dataclass
class DoctorReport:
    machine: dict[str, Any]
    gpu: dict[str, Any]
    rows: list[CheckRow] = field(default_factory=list)
    workers: list[dict[str, Any]] = field(default_factory=list)
    runs: list[SmokeRun] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return "fail" not in {row.status for row in self.rows} | {r.status for r in self.runs}

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {**data, "checks": data.pop("rows"), "ok": self.ok}


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def package_version(name: str) -> str | None:
    """The installed version of the package imported as ``name`` (None: missing), read from its
    metadata so nothing is imported (importing CuPy or RMM may touch the driver)."""
    if name == "workbench":
        version = getattr(importlib.import_module("workbench"), "__version__", None)
        names = [] if version else ["dtrain-workbench"]
    else:
        version, names = None, [*_distributions().get(name, []), name]
    for distribution in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(distribution)
    return version


def machine_facts() -> dict[str, Any]:
    versions = {name: package_version(name) for name in (*REQUIRED_PACKAGES, *OPTIONAL_PACKAGES)}
    return {"python": platform.python_version(), "platform": platform.platform(), **versions}


def gpu_facts() -> dict[str, Any]:
    """This process's GPU runtime and GPU, each probe guarded (a broken driver is a row)."""
    facts: dict[str, Any] = {"available": False, "reason": None, "runtime": None, "count": 0}
    try:
        runtime = loaded_runtime()
        facts["runtime"] = runtime.name if runtime is not None else None
        facts["count"] = runtime.device_count() if runtime is not None else 0
    except Exception as error:
        return {**facts, "reason": f"the GPU runtime does not load: {one_line(error)}"}
    if runtime is None or facts["count"] == 0:
        return {**facts, "reason": missing_gpu_reason()}
    facts.update(available=True, nccl_available=runtime.nccl_available)
    for key, probe in (("identity", runtime.device_identity), ("versions", runtime.versions)):
        try:
            facts[key] = probe()
        except Exception as error:
            facts[key] = f"unknown ({one_line(error)})"
    facts["device_serializers"] = device_serializers_work(runtime.array_module)
    return facts


def machine_rows(machine: dict[str, Any], gpu: dict[str, Any]) -> list[CheckRow]:
    rows = [CheckRow("python", f"{machine['python']} ({machine['platform']})", "ok")]
    for name in REQUIRED_PACKAGES:
        rows.append(CheckRow(name, str(machine[name]), "ok" if machine[name] else "fail"))
    for name, purpose in OPTIONAL_PACKAGES.items():
        note = "" if machine[name] else f"not installed; needed only for {purpose}"
        rows.append(CheckRow(name, str(machine[name]), "ok", note))
    if not gpu["available"]:
        note = f"no GPU: {gpu['reason']}; checking the CPU path"
        return [*rows, CheckRow("GPU", f"none ({gpu['reason']})", "ok", note)]
    identity, versions = str(gpu["identity"]), gpu["versions"]
    rows += [
        CheckRow("GPU runtime", gpu["runtime"], "ok"),
        CheckRow("visible GPUs", str(gpu["count"]), "ok", "CUDA_VISIBLE_DEVICES applies"),
        CheckRow("this process's GPU", identity, "warn" if _failed(identity) else "ok"),
    ]
    if not isinstance(versions, dict):  # the probe failed: say how
        versions = {"GPU library": versions}
    rows += [
        CheckRow(f"{key} version", str(value), "warn" if _failed(str(value)) else "ok")
        for key, value in versions.items()
    ]
    nccl = "ok" if gpu["nccl_available"] else "warn"
    rows.append(CheckRow("NCCL available", str(gpu["nccl_available"]), nccl, "--allreduce nccl"))
    serializers = "ok" if gpu["device_serializers"] else "warn"
    note = "only --protocol ucx needs them (numba, rmm)"
    return [*rows, CheckRow("CUDA serializers", str(gpu["device_serializers"]), serializers, note)]


def _failed(value: str) -> bool:
    return value.startswith("unknown (")  # a probe's failure, as gpu_facts words it


def smoke_runs(request: DoctorRequest) -> list[SmokeRun]:
    """Each strategy's smallest telling shape on ``request.devices`` devices (the test suite's
    equivalence shapes), one-device first: it is the reference."""
    devices = request.devices
    shapes: dict[str, dict[str, Any]] = {
        "mirrored": {"allreduce": "ring"},
        "parameter-server": {"ps": 1},
        "pipeline": {"stages": devices},
        "hybrid": {"stages": devices // 2 if devices >= 4 and devices % 2 == 0 else 1},
        # Tensor ranks inside pipeline stages (the stage workers' split, not tensor-parallel's
        # partitioned graph), under the split-backward schedule.
        "mesh": (
            {"mesh": f"dp=1,tp=2,pp={devices // 2}", "schedule": "zero-bubble"}
            if devices % 2 == 0
            else {"mesh": f"dp={devices},tp=1,pp=1"}
        ),
        "tensor-parallel": {"tp": devices},
    }
    names = list(request.strategies or STRATEGIES.names())
    if any(name != "one-device" for name in names):
        names = ["one-device", *(name for name in names if name != "one-device")]
    runs = []
    for name in names:
        options, count = shapes.get(name, {}), 1 if name == "one-device" else devices
        size = 0
        if isinstance(STRATEGIES[name], ClusterStrategy):
            shape = resolve_options(RunConfig(strategy=name, devices=count, **options))
            size = STRATEGIES[name].device_count(shape)
        runs.append(SmokeRun(name, name, count, dict(options), size))
    return runs


def run_config(run: SmokeRun, request: DoctorRequest, share_gpu: bool, cluster: Any) -> RunConfig:
    width = request.devices
    return RunConfig(
        strategy=run.strategy,
        devices=run.devices,
        steps=SMOKE_STEPS,
        batch_size=16 * width,  # divides among every shape's replicas and micro-batches
        hidden=(16,) * max(1, width - 1),  # a layer per device, for the pipelines
        dtype="float64",
        lr_decay="none",
        device_type=run.device_type,
        share_gpu=share_gpu and run.device_type == "gpu",
        cluster=cluster if run.cluster_devices else None,
        no_calibrate=True,  # seconds a smoke run need not spend
        stall_timeout=30.0,
        max_restarts=0,  # a device failure is what the doctor must see, not recover from
        **run.options,
    )


def execute(run: SmokeRun, config: RunConfig, reference: Any, progress: Progress) -> Any:
    """Train ``run`` (filled in place) and compare it with ``reference``; its result."""
    try:
        config = validate_config(config)
    except ConfigError as error:
        run.reason = f"this shape does not fit: {error}"
        return None
    progress(f"[doctor] {run.label}: {run.devices} {run.device_type} device(s)")
    start = time.perf_counter()
    try:
        result = run_training(config, progress=lambda line: None)
    except Exception as error:  # whatever broke is the finding, in one line
        run.status, run.reason = "fail", one_line(error)
        return None
    finally:
        run.seconds = round(time.perf_counter() - start, 2)
    run.status, run.final_loss = "pass", result.summary["final_loss"]
    run.device_type = result.summary["device_type"]  # as the workers decided
    if reference is not None and run.strategy != "one-device":
        run.largest_difference = largest_difference(result.parameters, reference.parameters)
        run.parameters_match = run.largest_difference <= TOLERANCE
        if not run.parameters_match:
            run.status = "fail"
            run.reason = f"parameters differ from one-device's by {run.largest_difference:.1e}"
    return result


def largest_difference(parameters: dict, expected: dict) -> float:
    """The largest difference from ``expected``, relative to each parameter's largest value."""
    if parameters.keys() != expected.keys():
        return float("inf")
    return max(
        float(np.max(np.abs(parameters[name] - value)) / max(np.max(np.abs(value)), 1e-300))
        for name, value in expected.items()
    )


def decide_device_type(
    request: DoctorRequest, gpu: dict[str, Any], reports: dict[str, dict] | None, needed: int
) -> tuple[str, bool, str | None]:
    """The device type, whether devices share a GPU, and what refuses ``--device-type gpu``.
    GPUs wherever there are some: on this machine (``reports`` None) any, shared when fewer
    than the devices; on the user's cluster, one on every worker."""
    if request.device_type == "cpu":
        return "cpu", False, None
    if reports is None and gpu["available"]:
        return "gpu", request.share_gpu or needed > gpu["count"], None
    if reports and all(report["gpu"] for report in reports.values()):
        return "gpu", request.share_gpu or bool(shared_gpus(reports)), None
    missing = gpu["reason"] if reports is None else "not every worker has one (see below)"
    return "cpu", False, f"--device-type gpu: {missing}" if request.device_type == "gpu" else None


def device_reports(client: Any) -> dict[str, dict]:
    """Every worker's :func:`describe_device` report, in rank order."""
    addresses = ordered_workers(client)
    reports = client.run(describe_device, workers=addresses)
    return {address: reports[address] for address in addresses}


def worker_rows(
    client: Any, reports: dict[str, dict], device_type: str, report: DoctorReport, share: bool
):
    """A row per worker: its host, GPU and NCCL, and its versions unlike this client's."""
    versions = client.run(installed_versions, device_type, workers=list(reports))
    mine = installed_versions(device_type)
    shared = {address for group in shared_gpus(reports).values() for address in group}
    for rank, (address, facts) in enumerate(reports.items()):
        differences = [
            f"{package} {versions[address].get(package)} (client {version})"
            for package, version in mine.items()
            if versions[address].get(package) != version
        ]
        status, note = "ok", "" if facts["gpu"] else f"cpu: {facts['reason']}"
        if address in shared and share:
            note = "shares its GPU with another worker (--share-gpu)"
        elif address in shared:
            status, note = "warn", "shares its GPU with another worker: runs need --share-gpu"
        if differences:
            status, note = "fail", "versions differ: " + ", ".join(differences)
        value = f"{facts['host']} {facts['gpu_identity'] or 'cpu'}"
        value += f" nccl {facts['nccl']}" if facts["gpu"] else ""
        report.rows.append(CheckRow(f"worker {rank}", value, status, note))
        report.workers.append({"address": address, **facts, "versions": versions[address]})
        report.workers[-1].update(version_differences=differences, status=status)


def nccl_run(request: DoctorRequest, gpu: dict, reports: dict, joined: bool) -> SmokeRun:
    """mirrored with NCCL: on the doctor's cluster if its first devices have a GPU each, else on
    a cluster of two of this machine's GPUs, else skipped, saying what stands in the way."""
    run = SmokeRun("mirrored (nccl)", "mirrored", request.devices, {"allreduce": "nccl"})
    run.cluster_devices = request.devices
    first = list(reports)[: request.devices]
    labels = {address: f"worker {rank}" for rank, address in enumerate(first)}
    obstacle = nccl_obstacle({address: reports[address] for address in first}, labels)
    if obstacle is not None and not joined and gpu["count"] >= 2 and gpu.get("nccl_available"):
        run.devices = run.cluster_devices = 2
        run.own_cluster, obstacle = True, None
        run.note = "on a cluster of its own: the doctor's devices share GPUs"
    run.reason = obstacle or ""
    return run


def run_doctor(request: DoctorRequest, progress: Progress) -> DoctorReport:
    """Check this machine and the cluster's workers, then train every smoke run. Raises
    :class:`~workbench.runtime.cluster.ClusterError` when the user's cluster is unreachable."""
    report = DoctorReport(machine_facts(), gpu_facts())
    gpu, report.rows = report.gpu, machine_rows(report.machine, report.gpu)
    runs = [] if request.skip_runs else smoke_runs(request)
    needed = max((run.cluster_devices for run in runs), default=0)
    joined = request.cluster is not None or request.scheduler_file is not None
    with contextlib.ExitStack() as stack:
        client, reports = None, {}
        if joined:
            target = ClusterTarget(address=request.cluster, scheduler_file=request.scheduler_file)
            client, _ = target.connect(10.0, None, progress)
            stack.callback(client.close)
            reports = device_reports(client)
        device_type, share, problem = decide_device_type(
            request, gpu, reports if joined else None, needed
        )
        note = problem or ""
        if share and not request.share_gpu:
            where = "workers share GPUs" if joined else f"{needed} devices on {gpu['count']} GPU(s)"
            note = f"shared GPU: {where}; --share-gpu set automatically"
        gpu.update(device_type=device_type, share_gpu=share, device_type_note=note)
        report.rows.append(CheckRow("device type", device_type, "fail" if problem else "ok", note))
        runs = [] if problem else runs
        if not joined and needed and runs:
            progress(f"[doctor] starting a local cluster of {needed} {device_type} devices")
            try:
                session = stack.enter_context(start_cluster(needed, device_type, share_gpu=share))
                client, reports = session.client, device_reports(session.client)
            except Exception as error:  # e.g. dask-cuda missing: a finding, not a crash
                report.rows.append(CheckRow("local cluster", "none", "fail", one_line(error)))
        if client is not None:
            worker_rows(client, reports, device_type, report, share)
        mirrored = [index for index, run in enumerate(runs) if run.label == "mirrored"]
        if device_type == "gpu" and mirrored:
            runs.insert(mirrored[0] + 1, nccl_run(request, gpu, reports, joined))
        report.runs = runs
        # one-device runs here: on this machine's GPU if it has one, else on its CPU.
        here = device_type if gpu["available"] else "cpu"
        reference = None
        for run in runs:
            run.device_type = here if run.strategy == "one-device" else device_type
            if run.reason:  # skipped before it started
                continue
            if run.cluster_devices and client is None:
                run.status, run.reason = "fail", "no cluster to run on (see the rows above)"
                continue
            if run.cluster_devices > len(reports) and not run.own_cluster:
                run.reason = f"needs {run.cluster_devices} workers; the cluster has {len(reports)}"
                continue
            cluster = None if run.own_cluster else client
            config = run_config(run, request, share and not run.own_cluster, cluster)
            result = execute(run, config, reference, progress)
            reference = result if run.strategy == "one-device" else reference
    return report
