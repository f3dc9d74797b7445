"""The client's side of the wire: send a run's events to the scheduler's run board.

A background thread reads the run's :class:`~workbench.events.EventLog` from where it stopped
(as the live charts do) and sends what is new in one message (a row per event,
:mod:`~workbench.dashboard.wire_rows`), at most ``PUBLISH_HZ`` times a second. Training never
waits for it and never fails because of it: if the scheduler has no board (started without the
preload) or a send fails, the publisher says so once and stops. Its thread runs at a lower CPU
priority (``PUBLISHER_NICE``): on a machine whose cores the devices fill, the charts may lag a
little, the steps do not.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator

from workbench.dashboard.handlers import PRELOAD, PUBLISH_EVENTS
from workbench.dashboard.wire_rows import event_rows
from workbench.events import EventLog

PUBLISH_HZ = 4
MAX_BATCH = 5_000  # events per message: a backlog goes in several messages, none huge
SEND_TIMEOUT_S = 10.0
PUBLISHER_NICE = 10  # added to the thread's nice value (Linux: per thread)
CLOSE_TIMEOUT_S = 5.0  # how long the end of a run waits for the last batch


class EventPublisher:
    """Publishes ``log`` as run ``run_id`` (described by ``description``: strategy, devices,
    batch_size, steps) through ``client`` until :meth:`close`; ``warn`` gets the one line
    saying why publishing stopped, if it did."""

    def __init__(
        self,
        client,
        log: EventLog,
        run_id: str,
        description: dict,
        warn: Callable[[str], None],
    ) -> None:
        self.client, self.log, self.run_id = client, log, run_id
        self.description, self.warn = description, warn
        self.published = 0  # events the scheduler accepted
        self.stopped_because: str | None = None
        self._halt = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="dtrain-dashboard-publisher", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        with contextlib.suppress(AttributeError, OSError):  # not Linux, or not allowed
            thread = threading.get_native_id()
            niceness = os.getpriority(os.PRIO_PROCESS, thread) + PUBLISHER_NICE
            os.setpriority(os.PRIO_PROCESS, thread, min(niceness, 19))
        while True:
            halted = self._halt.wait(1.0 / PUBLISH_HZ)
            if not self._publish_new(finished=halted) or halted:
                return

    def _publish_new(self, finished: bool) -> bool:
        """Send every event not sent yet (the last message says whether the run ended);
        False once publishing has stopped for good."""
        while True:
            batch = self.log.since(self.published)[:MAX_BATCH]
            last = len(batch) < MAX_BATCH
            if not batch and not finished:
                return True
            try:
                reply = self.client.sync(
                    self._send,
                    event_rows(batch),
                    finished and last,
                    callback_timeout=SEND_TIMEOUT_S,
                )
            except Exception as error:  # the cluster going away must not fail training
                return self._stop(f"sending events to the scheduler failed ({error})")
            if reply is None:
                return self._stop(
                    f"the scheduler has no workbench pages; start it with --preload {PRELOAD}"
                )
            self.published += len(batch)
            if last:
                return True

    async def _send(self, events: list[tuple], finished: bool):
        return await getattr(self.client.scheduler, PUBLISH_EVENTS)(
            run=self.run_id, events=events, description=self.description, finished=finished
        )

    def _stop(self, reason: str) -> bool:
        self.stopped_because = reason
        self.warn(f"dashboard pages off: {reason}")
        return False

    def close(self) -> None:
        """Send what is left, marked as the run's end, and stop (never waits long)."""
        self._halt.set()
        self._thread.join(CLOSE_TIMEOUT_S)


@contextlib.contextmanager
def publishing(
    client, log: EventLog, run_id: str, description: dict, warn: Callable[[str], None]
) -> Iterator[EventPublisher]:
    """Publish ``log`` while the block runs; close (last batch, run marked ended) after it."""
    publisher = EventPublisher(client, log, run_id, description, warn)
    try:
        yield publisher
    finally:
        publisher.close()


def _has_pages(dask_scheduler=None) -> bool:
    """On the scheduler (``client.run_on_scheduler``): whether it took the preload."""
    return PUBLISH_EVENTS in dask_scheduler.handlers


def board_run_id(session, job) -> str:
    """The name the run goes by on the board: its id in the run store (what the sidebar, the
    CLI and ``?run=`` use), or for a run not recorded there the cluster session's own id."""
    return job.run_id or session.run_id


def publish_run(session, strategy: str, job, log: EventLog, progress: Callable[[str], None]):
    """:func:`publishing` for a training run on a cluster session, under
    :func:`board_run_id`. A cluster the run joined is asked first whether its scheduler has
    the pages (a message it has no handler for would put a traceback in its log)."""
    if not session.owned and not session.client.run_on_scheduler(_has_pages):
        progress(
            f"[{strategy}] dashboard pages off: the scheduler has no workbench pages; start it "
            f"with --preload {PRELOAD}"
        )
        return contextlib.nullcontext()
    description = {
        "strategy": strategy,
        "devices": list(session.device_names),
        "batch_size": job.config.batch_size,  # global: the throughput chart's samples per step
        "steps": job.total_steps,
    }
    return publishing(
        session.client,
        log,
        board_run_id(session, job),
        description,
        lambda line: progress(f"[{strategy}] {line}"),
    )
