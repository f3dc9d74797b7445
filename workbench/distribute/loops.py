"""Where a strategy's custom loop runs between calls: a cluster kept up across
``strategy.run`` calls and scheduled closures (:class:`ClusterLoop`), or, for ``one-device``,
a replica in this process (:class:`LocalLoop`).

A :class:`ClusterLoop` starts the cluster the strategy's ``fit`` would start and runs its
``DevicePlan``'s setup tasks, with the same specs, so every device program (buckets, ring,
update graph, shards) is ``fit``'s; each program that runs step functions is then wrapped in
its replica context (``workbench.parallel.custom_loops``). A step is one task per replica,
pinned like ``fit``'s; a closure is one task that Dask may give to any worker of the job.
``close`` drops the devices' state and closes what was started, whatever happened.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

from workbench.events import EventLog
from workbench.launch.runner import PreparedRun
from workbench.parallel.custom_loops import (
    LocalReplicaContext,
    StepFunctionError,
    run_step_function,
    setup_custom_loop,
)
from workbench.parallel.device_run import drop_device_state, snapshot_device, stage_run_dataset
from workbench.parallel.dispatch import DeviceFailure, FutureWatch, submit_each, wait_all
from workbench.parallel.worker_spec import WorkerSpec
from workbench.runtime.cluster import ClusterSession, start_run_cluster
from workbench.runtime.devices import device_name
from workbench.strategies.cluster_strategy import ClusterStrategy, PlanContext
from workbench.training.job import RestorePoint

Arguments = list[tuple[tuple, dict]]  # each replica's (args, kwargs)


class LoopBroken(RuntimeError):
    """A step failed with the replicas at different steps: the loop cannot go on."""


class LocalLoop:
    """``one-device``: the replica runs in this process."""

    def __init__(self, prepared: PreparedRun, log: EventLog) -> None:
        job, config = prepared.job, prepared.config
        spec = WorkerSpec(
            run_id=uuid.uuid4().hex[:12],
            config=config.to_dict(),
            rank=0,
            replicas=1,
            addresses=(),
            device_names=(device_name(job.device_type),),
            clock_origin=job.clock_origin,
            total_steps=job.total_steps,
            device_type=job.device_type,
            model=job.model,
            reads_own_data=False,  # a step function is given its rows
            initial_parameters=job.initial_parameters,
            initial_optimizer_state=job.initial_optimizer_state,
        )
        self.context = LocalReplicaContext(spec)
        self.log = log
        self.device_names = list(spec.device_names)

    def run(self, function: Callable, arguments: Arguments) -> list[Any]:
        ((args, kwargs),) = arguments
        result = self.context.call(function, args, kwargs)
        _log_phases(self.log, result["events"])
        return [result["value"]]

    def gather(self) -> tuple[dict, dict]:
        snapshot = self.context.snapshot()
        return snapshot["parameters"], snapshot["optimizer_state"]

    def close(self) -> None:
        self.context = None


class ClusterLoop:
    """The strategy's cluster, its devices set up as ``fit`` sets them up."""

    def __init__(
        self,
        definition: ClusterStrategy,
        prepared: PreparedRun,
        log: EventLog,
        contexts: dict[Callable, type],
    ) -> None:
        config, job = prepared.config, prepared.job
        self.name, self.log = definition.name, log
        self.deadline = config.stall_timeout + 120
        self.calls = 0
        self._stack = contextlib.ExitStack()
        self.session: ClusterSession | None = None
        try:
            self.session = session = self._stack.enter_context(
                start_run_cluster(
                    config,
                    definition.device_count(config),
                    job.device_type,
                    jobs=definition.jobs(config),
                )
            )
            stage_run_dataset(session, job, lambda line: None)
            start = RestorePoint.start_of(job)
            self.plan = definition.plan(config, job, PlanContext(session, lambda line: None, start))
            for group in self.plan.setups:
                context = contexts.get(group.function)
                arguments = [
                    (session.run_id, group.function, _client_paced(spec), context)
                    for spec in group.specs
                ]
                ready = submit_each(
                    session, self.name, "setup", None, setup_custom_loop, arguments, group.ranks
                )
                wait_all(session, ready, "setup", 0, self.deadline, ranks=group.ranks)
        except BaseException:
            self.close()
            raise
        self.device_names = list(session.device_names)
        self.ranks = list(self.plan.step_ranks)  # the replicas (or workers) step functions use

    def _live_session(self) -> ClusterSession:
        """The cluster, which ``close`` drops: using the loop after it fails as reading an
        attribute of the dropped session would."""
        if self.session is None:
            raise AttributeError("the loop is closed: its cluster session was dropped")
        return self.session

    # --- strategy.run ---------------------------------------------------------------------

    def run(self, function: Callable, arguments: Arguments) -> list[Any]:
        """One call of ``function`` on every replica, replica r with ``arguments[r]``."""
        session, call = self._live_session(), self.calls
        self.calls += 1
        futures = submit_each(
            session,
            self.name,
            "step-function",
            call,
            run_step_function,
            [(session.run_id, function, args, kwargs) for args, kwargs in arguments],
            ranks=self.ranks,
        )
        outcomes = self._settle(futures, call)
        failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if failed:
            # Replicas that applied the same number of steps, none of them half way (an error
            # in the step function before any collective, say), still agree and the loop may go
            # on. Otherwise some applied a step the others did not, or an update broke off.
            steps = {_iterations(outcome) for outcome in outcomes}
            if len(steps) != 1 or None in steps:
                raise LoopBroken(
                    f"strategy.run call {call} left the replicas out of step (applied steps "
                    f"per replica: {[_iterations(outcome) for outcome in outcomes]}): "
                    f"{failed[0]}"
                ) from failed[0]
            raise failed[0]
        for outcome in outcomes:
            _log_phases(self.log, outcome["events"])
        return [outcome["value"] for outcome in outcomes]

    def _settle(self, futures: list, call: int) -> list[Any]:
        """Each replica's result or error, once all are done (not at the first error, as a
        device step would: whether the replicas still agree depends on all of them). A device
        that leaves the cluster or a call past the deadline is a :class:`DeviceFailure`."""
        session = self._live_session()
        started = checked = time.monotonic()
        watch = FutureWatch(futures)
        while any(future.status == "pending" for future in futures):
            watch.wait()
            if time.monotonic() - checked > 0.5:
                checked = time.monotonic()
                alive = set(session.client.scheduler_info(n_workers=-1)["workers"])
                for rank in self.ranks:
                    if session.addresses[rank] not in alive:
                        raise DeviceFailure(
                            f"{session.device_names[rank]} died during strategy.run call "
                            f"{call} (its worker {session.addresses[rank]} left the cluster)",
                            session.device_names[rank],
                            call,
                        )
            if time.monotonic() - started > self.deadline:
                raise DeviceFailure(
                    f"strategy.run call {call} did not finish within {self.deadline:.0f}s",
                    None,
                    call,
                )
        outcomes: list[Any] = []
        for future in futures:
            if future.status == "finished":
                outcomes.append(future.result())
            else:
                outcomes.append(future.exception())
        return outcomes

    # --- ClusterCoordinator.schedule ----------------------------------------------------------

    def schedule(self, function: Callable, args: tuple, kwargs: dict, index: int) -> Any:
        """A future for one closure on any worker of the step ranks (Dask chooses)."""
        session = self._live_session()
        return session.client.submit(
            run_step_function,
            session.run_id,
            function,
            args,
            kwargs,
            key=f"dtrain-{self.name}-closure-{index}-{session.run_id}",
            workers=[session.addresses[rank] for rank in self.ranks],
            allow_other_workers=False,
            pure=False,
            retries=0,
        )

    # --- variables, closing -----------------------------------------------------------------------

    def snapshots(self) -> list[dict]:
        """The snapshot devices' variables, slots and what else they keep (a shard's
        staleness log); the events they kept go to the log."""
        ranks, session = self.plan.snapshot_ranks, self._live_session()
        futures = submit_each(
            session,
            self.name,
            "snapshot",
            self.calls,
            snapshot_device,
            [(session.run_id,)] * len(ranks),
            ranks=ranks,
        )
        found = wait_all(session, futures, "gathering variables", None, self.deadline, ranks)
        for snapshot in found:
            _log_phases(self.log, snapshot.pop("events", ()))
        return found

    def gather(self) -> tuple[dict, dict]:
        """(variables, slots), a partitioned variable's parts joined as ``fit`` joins them."""
        return self.plan.merge(self.snapshots())

    def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            with contextlib.suppress(Exception):  # the cluster closes next anyway
                cleanup = submit_each(
                    session,
                    self.name,
                    "cleanup",
                    None,
                    drop_device_state,
                    [(session.run_id,)] * len(session.addresses),
                )
                wait_all(session, cleanup, "cleanup", None, deadline=10)
        self._stack.close()


def _client_paced(spec: Any) -> Any:
    """A spec as the client's calls pace the run: a parameter-server shard counts no budget
    of updates (``fit``'s free-running workers stop on one); the closures decide."""
    if dataclasses.is_dataclass(spec) and hasattr(spec, "total_updates"):
        return dataclasses.replace(cast(Any, spec), total_updates=None)
    return spec


def _iterations(outcome: Any) -> int | None:
    if isinstance(outcome, StepFunctionError):
        return outcome.iterations
    if isinstance(outcome, dict):
        return outcome.get("iterations")
    return None


def _log_phases(log: EventLog, events) -> None:
    for event in events:
        log.emit(event)
