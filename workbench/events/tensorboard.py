"""A run's events as TensorBoard event files (written with tensorboardX; TensorBoard reads
them), live while the run trains or afterwards from the run store (``dtrain export``).

Scalars, against the global step:

- ``train/loss``, ``train/learning_rate``, ``train/samples_per_second``, and the run's other
  scalars as ``train/<name>`` (``staleness``, ``restarts``, ``dropped_updates``, ...);
- ``test/loss`` and ``test/accuracy`` at each evaluation;
- ``device/<device>/utilization`` (busy fraction of the step), ``device/<device>/bytes_sent``
  and ``device/<device>/bytes_received`` per step, and a device's own scalars as
  ``device/<device>/<name>`` (e.g. ``gpu_utilization``).

The run's flags go in as text (``config/flags``, a markdown table) and as hparams, whose
metrics (``hparam/final_loss``, ``hparam/test_accuracy``, ...) are written once the run ends.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.events.records import PhaseEvent, ScalarEvent
from workbench.events.step_figures import DeviceStep, StepFigures

FLUSH_EVERY_S = 2.0  # how stale a live run's files may be in TensorBoard
SCALAR_TAGS = {
    "loss": "train/loss",
    "lr": "train/learning_rate",
    "test_loss": "test/loss",
    "test_accuracy": "test/accuracy",
}
# The summary's figures that hparams compares runs by (hparam/<name>).
HPARAM_METRICS = ("final_loss", "test_loss", "test_accuracy", "samples_per_second")

if TYPE_CHECKING:
    from tensorboardX import SummaryWriter


def plain_device_label(device: str) -> str:
    """A device name as one tag segment, when no shorter name is given.

    Examples
    --------
    >>> plain_device_label("/job:worker/task:1/device:CPU:0")
    'job_worker_task_1_device_CPU_0'
    """
    return device.strip("/").replace("/", "_").replace(":", "_")


def flags_table(flags: Mapping[str, Any]) -> str:
    """The run's flags as a markdown table (TensorBoard's text tab renders it).

    Examples
    --------
    >>> print(flags_table({"strategy": "mirrored", "hidden": [8, 8], "lr": None}))
    | flag | value |
    |---|---|
    | --strategy | mirrored |
    | --hidden | 8,8 |
    | --lr | (default) |
    """
    rows = ["| flag | value |", "|---|---|"]
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        text = _as_text(value).replace("|", r"\|")  # a bar would end the cell
        rows.append(f"| {flag} | {text} |")
    return "\n".join(rows)


def _as_text(value: Any) -> str:
    if value is None:
        return "(default)"
    if isinstance(value, list | tuple):
        return ",".join(_as_text(item) for item in value)
    return str(value)


def hparam_values(flags: Mapping[str, Any]) -> dict[str, str | bool | int | float]:
    """The flags as hparams: numbers, switches and text as they are, lists as text, unset
    (None) flags left out.

    Examples
    --------
    >>> hparam_values({"devices": 2, "hidden": [8], "lr": None, "json": False})
    {'devices': 2, 'hidden': '8', 'json': False}
    """
    values: dict[str, str | bool | int | float] = {}
    for name, value in flags.items():
        if value is None:
            continue
        values[name] = value if isinstance(value, str | bool | int | float) else _as_text(value)
    return values


def fresh_directory(root: str | os.PathLike, name: str) -> Path:
    """``root/name``, or ``root/name-2``, ``-3``, ... if taken: each run gets a folder of its
    own, so runs side by side compare in TensorBoard.

    Examples
    --------
    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> (Path(root) / "run").mkdir()
    >>> fresh_directory(root, "run").name
    'run-2'
    """
    candidate, number = Path(root).expanduser() / name, 1
    while candidate.exists():
        number += 1
        candidate = Path(root).expanduser() / f"{name}-{number}"
    return candidate


class TensorBoardWriter:
    """Writes one run into ``directory``: subscribe :meth:`write` to the run's event log (or
    call it for each stored event), then :meth:`close` with the run's summary, if it has one.

    ``flags`` is the run's ``RunConfig.to_dict()``; ``time_origin`` the wall-clock time (epoch
    seconds) that event times count from; ``device_label`` gives a device's short name.

    Examples
    --------
    >>> import tempfile
    >>> board = TensorBoardWriter(tempfile.mkdtemp(), {"strategy": "one-device"}, batch_size=32)
    >>> board.write(ScalarEvent("loss", 0, 2.3, 0.1))
    >>> board.close({"final_loss": 2.3})
    >>> board.tags_written()
    ['hparam/final_loss', 'train/loss']
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        flags: Mapping[str, Any],
        batch_size: int,
        device_label: Callable[[str], str] = plain_device_label,
        time_origin: float | None = None,
        flush_secs: float = FLUSH_EVERY_S,
    ) -> None:
        self.directory = Path(directory)
        self._flags = dict(flags)
        self._label = device_label
        self._origin = time_origin
        self._figures = StepFigures(batch_size)
        self._lock = threading.Lock()  # events arrive from the run's threads
        self._tags: set[str] = set()
        self._last_step = 0
        self._last_loss: float | None = None
        # Imported here, not with the module: tensorboardX imports PyTorch when it is installed
        # (seconds), and only runs that write TensorBoard files need it.
        from tensorboardX import SummaryWriter

        self._writer: SummaryWriter | None = SummaryWriter(
            logdir=str(self.directory), flush_secs=flush_secs
        )
        self._writer.add_text("config/flags", flags_table(self._flags), 0)

    def write(self, event: PhaseEvent | ScalarEvent) -> None:
        """Add one event (a no-op once closed: events after the run's end are not its own)."""
        with self._lock:
            if self._writer is None:
                return
            self._last_step = max(self._last_step, event.step)
            if isinstance(event, PhaseEvent):
                self._figures.add_phase(event)
            else:
                self._scalar(event)

    def _scalar(self, event: ScalarEvent) -> None:
        wall = self._wall(event.time)
        tag = SCALAR_TAGS.get(event.name)
        if tag is None:
            tag = (
                f"{self._device_prefix(event.device)}/{event.name}"
                if event.device
                else f"train/{event.name}"
            )
        self._add(tag, event.value, event.step, wall)
        if event.name != "loss":
            return
        self._last_loss = event.value
        pace = self._figures.loss_seen(event.step)
        if pace is not None:
            self._add("train/samples_per_second", pace, event.step, wall)
        self._add_devices(self._figures.complete_devices(), wall)

    def _add_devices(self, steps: Iterable[DeviceStep], wall: float | None) -> None:
        for figure in steps:
            prefix = self._device_prefix(figure.device)
            self._add(f"{prefix}/utilization", figure.utilization, figure.step, wall)
            self._add(f"{prefix}/bytes_sent", figure.bytes_sent, figure.step, wall)
            self._add(f"{prefix}/bytes_received", figure.bytes_received, figure.step, wall)

    def _device_prefix(self, device: str) -> str:
        return f"device/{self._label(device)}"

    def _wall(self, seconds: float) -> float | None:
        return None if self._origin is None else self._origin + seconds

    def _add(self, tag: str, value: float, step: int, wall: float | None) -> None:
        assert self._writer is not None
        self._writer.add_scalar(tag, value, step, walltime=wall)
        self._tags.add(tag)

    def tags_written(self) -> list[str]:
        """The scalar tags written so far, sorted."""
        return sorted(self._tags)

    def close(self, summary: Mapping[str, Any] | None = None) -> None:
        """Write what is still open and the hparams (with the summary's figures, else the last
        loss: a failed run has no summary), then flush and close the files. Idempotent."""
        with self._lock:
            if self._writer is None:
                return
            self._add_devices(self._figures.drain(), None)
            metrics = {
                f"hparam/{name}": float(summary[name])
                for name in HPARAM_METRICS
                if summary is not None and summary.get(name) is not None
            }
            if not metrics and self._last_loss is not None:
                metrics["hparam/final_loss"] = self._last_loss
            from tensorboardX.summary import hparams

            for part in hparams(hparam_values(self._flags), metrics):
                self._writer.file_writer.add_summary(part)
            for tag, value in metrics.items():  # hparams reads its metrics from scalars
                self._add(tag, value, self._last_step, None)
            self._writer.close()
            self._writer = None


def write_run(
    directory: str | os.PathLike,
    events: Iterable[PhaseEvent | ScalarEvent],
    flags: Mapping[str, Any],
    summary: Mapping[str, Any] | None = None,
    device_label: Callable[[str], str] = plain_device_label,
    time_origin: float | None = None,
) -> list[str]:
    """Write a finished run's events into ``directory`` at once; returns the scalar tags.

    Examples
    --------
    >>> import tempfile
    >>> from workbench.events.records import Phase
    >>> events = [PhaseEvent("gpu0", Phase.COMPUTE, 0, 0.0, 0.5), ScalarEvent("loss", 0, 2.3, 0.5)]
    >>> write_run(tempfile.mkdtemp(), events, {"batch_size": 32}, {"test_accuracy": 0.5})
    ... # doctest: +NORMALIZE_WHITESPACE
    ['device/gpu0/bytes_received', 'device/gpu0/bytes_sent', 'device/gpu0/utilization',
     'hparam/test_accuracy', 'train/loss']
    """
    board = TensorBoardWriter(
        directory,
        flags,
        batch_size=int(flags.get("batch_size") or 1),
        device_label=device_label,
        time_origin=time_origin,
    )
    try:
        for event in events:
            board.write(event)
    finally:
        board.close(summary)
    return board.tags_written()
