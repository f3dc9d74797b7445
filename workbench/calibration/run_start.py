"""Calibration at run start: time the nodes of the graphs the run's devices will execute, and
(once per cluster) the links between them and Dask's dispatch, reusing what the run store has
cached for the same cluster.

The devices time the model's training graph at each batch size they compute on (a replica's
share, a pipeline's micro-batch, the whole batch); only signatures not cached yet are timed,
so a second run of the same model on the same cluster measures nothing. ``--no-calibrate``
measures nothing and uses the cache if there is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.calibration.probe import (
    TRANSFER_SIZES,
    calibrate_in_process,
    calibrate_session,
    cluster_signature,
    in_process_signature,
    session_signature,
)
from workbench.costs import Calibration
from workbench.ir import Graph
from workbench.runtime.cluster import ClusterSession
from workbench.store import RunStore
from workbench.training.graphs import build_training_graph
from workbench.training.job import Progress, TrainingJob


@dataclass(frozen=True)
class RunCalibration:
    """A run's calibration so far (None: it does not calibrate and nothing is cached) and the
    seconds measuring it cost this run (0: all of it cached)."""

    calibration: Calibration | None = None
    seconds: float = 0.0


def timed_graphs(job: TrainingJob, batch_sizes: Sequence[int]) -> list[Graph]:
    """The model's training step at each batch size a device computes on."""
    return [
        build_training_graph(job.model, job.optimizer, size, job.config.dtype).graph
        for size in sorted(set(batch_sizes))
    ]


def cached_local_calibration(
    device_type: str, device_names: Sequence[str], store: RunStore | None = None
) -> Calibration | None:
    """What the run store has cached for the local cluster a run on these devices starts
    (every worker on 127.0.0.1), or None: the costs a plan can show before any cluster.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as root:
    ...     print(cached_local_calibration("cpu", ["/task:0", "/task:1"], RunStore(root)))
    None
    """
    hosts = ["127.0.0.1"] * len(device_names)
    text = (store or RunStore()).load_calibration(
        cluster_signature(device_type, device_names, hosts)
    )
    return Calibration.from_json(text) if text else None


def calibrate_run(
    job: TrainingJob,
    batch_sizes: Sequence[int],
    progress: Progress,
    session: ClusterSession | None = None,
    in_process_device: str | None = None,
    store: RunStore | None = None,
    wires: Sequence[str] = ("peer",),
    link_sizes: Sequence[int] = TRANSFER_SIZES,
) -> RunCalibration:
    """The run's calibration, measured on ``session``'s devices (or in this process, as
    ``in_process_device``), cached in the run store."""
    store = store or RunStore()
    if session is not None:
        signature = session_signature(session)
    else:
        assert in_process_device is not None
        signature = in_process_signature(in_process_device, job.device_type)
    text = store.load_calibration(signature)
    cached = Calibration.from_json(text) if text else None
    if job.config.no_calibrate:
        return RunCalibration(cached)
    graphs = timed_graphs(job, batch_sizes)
    if session is not None:
        calibration = calibrate_session(
            session,
            graphs,
            known=cached,
            stall_timeout=job.config.stall_timeout,
            wires=wires,
            link_sizes=link_sizes,
        )
    else:
        calibration = calibrate_in_process(graphs, in_process_device, job.device_type, cached)
    spent = calibration.measured_seconds - (cached.measured_seconds if cached else 0.0)
    if cached is None or spent > 0.01:
        store.save_calibration(signature, calibration.to_json())
    progress(f"[calibrate] devices timed in {spent:.2f} s ({'cached' if cached else 'new'})")
    return RunCalibration(calibration, max(spent, 0.0))


def add_to_calibration(
    so_far: RunCalibration,
    session: ClusterSession,
    measured: Calibration,
    progress: Progress,
    store: RunStore | None = None,
) -> RunCalibration:
    """The run's calibration ``so_far`` with ``measured`` added (what a strategy measures
    beyond nodes and links, e.g. its all-reduce), cached with it in the run store."""
    assert so_far.calibration is not None
    calibration = so_far.calibration.merged(measured)
    (store or RunStore()).save_calibration(session_signature(session), calibration.to_json())
    kinds = sorted({key.split(" over ")[0] for key in measured.collectives}) or ["more"]
    progress(f"[calibrate] {', '.join(kinds)} timed in {measured.measured_seconds:.2f} s")
    return RunCalibration(calibration, so_far.seconds + measured.measured_seconds)
