"""The client's side of free-running parameter-server workers (async mode, or sync with backup
workers): no barrier between chunks of steps.

Each worker gets one long task, its own pull-compute-push loop, and ends it when the shards
say the run's updates are spent (:mod:`protocol`). Meanwhile the client polls shard 0, which
holds the reports workers attach to their pushes, and turns them into events, losses, staleness
and progress lines; a Stop asked by the user spends the budget at once. A worker that dies is
dropped (the shards forget its outstanding read; an update it had in flight never arrives) and
training goes on with the rest; a worker that joins the cluster is set up in its place and put
to work. A shard that dies is a :class:`DeviceFailure`: the run is restored from the last
checkpoint (:mod:`workbench.parallel.device_run`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from workbench.events.records import Phase, PhaseEvent, StepReport
from workbench.parallel.dispatch import DeviceFailure, submit_each, wait_all
from workbench.parallel.loop_run import LoopRun, RoundHooks
from workbench.parallel.parameter_server.shard_service import call_shard
from workbench.parallel.parameter_server.worker_loop import run_free_steps
from workbench.runtime.cluster import ClusterSession, ordered_workers
from workbench.runtime.devices import device_tag

POLL_S = 0.2  # how often the client drains shard 0: the live charts' refresh
SHARD_CALL_ATTEMPTS = 3


class FreeRunningDriver:
    """Drives one attempt of a free-running run: ``workers`` and ``shards`` are ranks of the
    session; ``respec(rank)`` is a fresh worker spec for ``rank`` on the session's current
    addresses (to set up a replacement with ``setup``)."""

    def __init__(
        self,
        workers: Sequence[int],
        shards: Sequence[int],
        setup: Callable,
        respec: Callable[[int], Any],
        updates_per_step: int,
    ) -> None:
        self.workers, self.shards = list(workers), list(shards)
        self.setup, self.respec = setup, respec
        self.updates_per_step = updates_per_step

    def __call__(
        self, session: ClusterSession, run: LoopRun, first: int, hooks: RoundHooks
    ) -> None:
        """Run steps ``first`` .. ``run.total_steps``. The workers cannot pause: where
        ``hooks.pause_at(step)`` after a round, ``hooks.at_pause(step)`` runs while they go on
        (a checkpoint's snapshot is the shards')."""
        self.session, self.run, self.log = session, run, run.log
        self.progress, self.strategy = run.progress, run.name
        log, progress = run.log, run.progress
        running = {rank: self._start(rank, first) for rank in self.workers}
        self.vacant: list[int] = []  # ranks whose worker was dropped, until replaced
        stopped, dropped, step, done_since = False, 0, first, None
        self.step, self.finished = first, False
        printed_epoch = None
        while running:
            time.sleep(POLL_S)
            if run.stop.is_set() and not stopped:
                stopped = True
                self._each_shard("stop")
            alive = ordered_workers(session.client)  # one scheduler round trip per poll
            self._check_shards(set(alive))
            status = self._call_shard(self.shards[0], "drain")
            events = self._log_reports(status["reports"])
            if status["dropped"] > dropped:
                dropped = status["dropped"]
                log.scalar("dropped_updates", step, dropped, run.clock())
            now = min(status["version"] // self.updates_per_step, run.total_steps)
            losses = log.scalars("loss")
            if losses and losses[-1].step != printed_epoch:
                line = run.epoch_line(losses[-1].step, losses[-1].value)
                if line:
                    printed_epoch = losses[-1].step
                    progress(line)
            if now > step:
                rate = run.learning_rate(min(now, run.total_steps - 1))
                log.scalar("lr", now, rate, run.clock())
                hooks.after_round(step, now, [{"events": events}])
                if hooks.pause_at(now):
                    hooks.at_pause(now)
                step = self.step = now
            self.finished = status["done"]
            self._collect(running, alive, first=step)
            if status["done"]:
                done_since = done_since or time.monotonic()
                if time.monotonic() - done_since > run.stall_timeout:
                    for rank in list(running):  # silent past the end: it stalled
                        self._drop(running, rank, "did not finish after the last update")
        self._log_reports(self._call_shard(self.shards[0], "drain")["reports"])

    # --- workers ---------------------------------------------------------------------------

    def _start(self, rank: int, first: int):
        (future,) = submit_each(
            self.session,
            self.strategy,
            "loop",
            first,
            run_free_steps,
            [(self.session.run_id, first)],
            ranks=[rank],
        )
        return future

    def _collect(self, running: dict, alive: list[str], first: int) -> None:
        """Finished loops report their last events; failed or vanished ones are dropped and
        replaced when a spare worker (one of ``alive`` the run does not use) is there."""
        alive_here, used = set(alive), set(self.session.addresses)
        for rank, future in list(running.items()):
            if future.status == "finished":
                with contextlib.suppress(Exception):
                    self._log_reports([future.result(timeout=10)])
                    del running[rank]
                    continue
            gone = self.session.addresses[rank] not in alive_here
            if gone or future.status in ("error", "cancelled", "lost"):
                detail = "its worker left the cluster" if gone else self._error_of(future)
                self._drop(running, rank, detail)
        spares = [address for address in alive if address not in used]
        while self.vacant and spares and not self.finished:
            self._replace(running, self.vacant.pop(0), spares.pop(0), first)

    def _drop(self, running: dict, rank: int, detail: str) -> None:
        device = self.session.device_names[rank]
        running.pop(rank, None)
        self.vacant.append(rank)
        noticed = self.run.clock()
        reason = f"{device_tag(device)}: dropped ({detail})"
        self.log.emit(PhaseEvent(device, Phase.FAILURE, self.step, noticed, noticed, reason=reason))
        self.progress(
            f"[{self.strategy}] {device} dropped ({detail}); its update in flight is "
            "discarded and the other workers go on"
        )
        self._each_shard("forget", worker=rank)

    def _replace(self, running: dict, rank: int, address: str, first: int) -> None:
        session = self.session
        session.addresses[rank] = address
        self._each_shard("rejoin", worker=rank, address=address)
        # Not through the lost process's channels: see ParameterServerWorkerSpec.
        spec = replace(self.respec(rank), shared_memory=False)
        ready = submit_each(session, self.strategy, "setup", first, self.setup, [(spec,)], [rank])
        wait_all(session, ready, "setup", first, self.run.stall_timeout, ranks=[rank])
        running[rank] = self._start(rank, first)
        self.progress(f"[{self.strategy}] {session.device_names[rank]} replaced by {address}")

    @staticmethod
    def _error_of(future) -> str:
        try:
            error = future.exception(timeout=5)
            return f"{type(error).__name__}: {error}"
        except Exception as problem:
            return f"{future.status} ({problem!r})"

    # --- shards ----------------------------------------------------------------------------

    def _call_shard(self, rank: int, method: str, **arguments: Any) -> Any:
        """``method`` (one of its ``rpc_handlers``) on shard ``rank``. A call that fails while
        the shard's worker is still there (the scheduler busy removing a dead worker, say) is
        tried again; a shard that is gone, or keeps failing, is a :class:`DeviceFailure`."""
        address, device = self.session.addresses[rank], self.session.device_names[rank]
        for attempt in range(SHARD_CALL_ATTEMPTS):
            try:
                replies = self.session.client.run(
                    call_shard, self.session.run_id, method, workers=[address], **arguments
                )
                return replies[address]
            except Exception as error:
                gone = address not in ordered_workers(self.session.client)
                if gone or attempt == SHARD_CALL_ATTEMPTS - 1:
                    raise DeviceFailure(
                        f"{device} did not answer {method}: {error}", device, None
                    ) from error
                time.sleep(0.2)

    def _each_shard(self, method: str, **arguments: Any) -> None:
        for rank in self.shards:
            self._call_shard(rank, method, **arguments)

    def _check_shards(self, alive: set[str]) -> None:
        for rank in self.shards:
            if self.session.addresses[rank] not in alive:
                raise DeviceFailure(
                    f"{self.session.device_names[rank]} died (its worker "
                    f"{self.session.addresses[rank]} left the cluster)",
                    self.session.device_names[rank],
                    None,
                )

    # --- reports ---------------------------------------------------------------------------

    def _log_reports(self, reports: list[StepReport]) -> list[PhaseEvent]:
        log, clock = self.log, self.run.clock
        events: list[PhaseEvent] = []
        for report in reports:
            for event in report["events"]:
                log.emit(event)
                events.append(event)
            for step, loss in report["losses"]:
                if loss is not None:  # a worker always has one: the type allows a device none
                    log.scalar("loss", step, loss, clock(), device=report["device"])
            for step, staleness in report["staleness"]:
                log.scalar("staleness", step, staleness, clock())
            for name, step, value, device in report.get("scalars", ()):
                log.scalar(name, step, value, clock(), device=device)
        return events
