"""A run store of the test's own with runs built from real events, and a Jupyter server with
only the workbench extension enabled, reading that store."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

# pytest-jupyter's fixtures (jp_fetch, jp_serverapp, ...) and its hooks for async tests. Not as
# ``pytest_plugins``: pytest refuses that outside the top-level conftest, and there it would
# put pytest-jupyter's autouse fixtures (a fresh event loop, a ServerApp cleanup) on every test
# of the project; imported here they apply to tests/server only.
from pytest_jupyter.jupyter_server import *  # noqa: F403

from workbench.events.records import PhaseEvent, ScalarEvent
from workbench.store import STORE_ENVIRONMENT, RunRecorder, RunStore
from workbench.store import run_store as run_store_module

DEVICES = ("/task:0", "/task:1")


def step_events(step: int, devices: tuple[str, ...] = DEVICES) -> list[PhaseEvent | ScalarEvent]:
    """One data-parallel step: compute, then an all-reduce moving 1 kB each way, then the loss."""
    start = 0.1 * step
    events: list[PhaseEvent | ScalarEvent] = []
    for device in devices:
        events.append(PhaseEvent(device, "compute", step, start, start + 0.06))
        events.append(PhaseEvent(device, "allreduce", step, start + 0.06, start + 0.09, 1000, 1000))
    events.append(ScalarEvent("loss", step, 2.0 / (step + 1), start + 0.09))
    return events


class StoreBuilder:
    """Writes runs into the store the way a kernel does (``RunStore.create`` + ``RunRecorder``)."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.live: list[RunRecorder] = []

    def run(
        self,
        run_id: str,
        steps: int = 4,
        recorded: int | None = None,
        strategy: str = "mirrored",
        state: str | None = "finished",
        started: float = 1000.0,
        **status: object,
    ) -> RunRecorder:
        """A run of ``steps`` steps with ``recorded`` of them recorded (by default all, or all
        but the last for a run still running: with its last step in it reads ``finished``),
        ended in ``state`` (None: still running); ``status`` adds fields to its status.json."""
        config = {"strategy": strategy, "devices": 2, "steps": steps, "batch_size": 32}
        recorder = self.store.create(run_id, config, steps=steps)
        recorder.annotate(started=started, **status)
        if recorded is None:
            recorded = steps if state is not None else steps - 1
        for step in range(recorded):
            self.record(recorder, step)
        if state is None:
            self.live.append(recorder)
        else:
            summary = {"steps": steps, "final_loss": 0.5} if state == "finished" else None
            recorder.finish(state, summary=summary)
        return recorder

    @staticmethod
    def record(recorder: RunRecorder, step: int) -> None:
        for event in step_events(step):
            recorder.record(event)

    def close(self) -> None:
        for recorder in self.live:
            if recorder.run.status()["state"] == "running":
                recorder.finish("stopped")


@pytest.fixture
def store_root(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv(STORE_ENVIRONMENT, str(root))
    # Every event is flushed and status.json rewritten at once, so a test sees what it recorded.
    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 0.0)
    return root


@pytest.fixture
def runs(store_root) -> Iterator[StoreBuilder]:
    builder = StoreBuilder(RunStore(store_root))
    yield builder
    builder.close()


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def jp_server_config(store_root):
    # Depends on store_root so the extension's RunsManager reads the test's store.
    return {"ServerApp": {"jpserver_extensions": {"workbench.server": True}}}
