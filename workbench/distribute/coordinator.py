"""``tf.distribute``'s ``ClusterCoordinator`` for a parameter server: closures scheduled on
whichever worker is free, run asynchronously, their results fetched later.

A closure is one Dask task that may run on any worker of the parameter server's worker job
(Dask chooses; the shards never run closures). In it, ``model.compute_gradients(x, y)`` pulls
the variables from every shard and computes on that worker's device, and
``model.optimizer_apply(gradients)`` pushes the gradients, which the shards apply on arrival
(``mode="async"``, bounded by ``staleness`` if given). An error in a closure surfaces at its
``fetch`` and at ``join``, naming the worker it ran on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workbench.config import ConfigError
from workbench.distribute.values import contains_per_replica

COORDINATED = "parameter-server"


class RemoteValue:
    """The result of a scheduled closure, once it has run (``fetch``)."""

    def __init__(self, future: Any, index: int, log: Any) -> None:
        self._future, self.index, self._log = future, index, log
        self._result: dict | None = None

    def done(self) -> bool:
        return self._result is not None or self._future.status != "pending"

    def fetch(self) -> Any:
        """The closure's return value, waiting for it; the closure's error (a
        ``StepFunctionError`` naming the worker) if it raised."""
        if self._result is None:
            self._result = self._future.result()
            for event in self._result["events"]:
                self._log.emit(event)
        return self._result["value"]

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return f"RemoteValue(closure {self.index}, {state})"


class ClusterCoordinator:
    """Schedules closures on a ``ParameterServerStrategy``'s workers.

    Parameters
    ----------
    strategy : ParameterServerStrategy
        With ``mode="async"``: closures run when a worker is free and push when they are
        done, so no step waits for the others. Its compiled model is what the closures train.

    Examples
    --------
    >>> import workbench
    >>> strategy = workbench.ParameterServerStrategy(devices=2, ps=1, mode="async")
    >>> coordinator = workbench.ClusterCoordinator(strategy)
    >>> try:
    ...     workbench.ClusterCoordinator(workbench.MirroredStrategy(devices=2))
    ... except workbench.ConfigError as error:
    ...     print(error.field)
    strategy
    """

    def __init__(self, strategy: Any) -> None:
        name = type(strategy).__name__
        if getattr(strategy, "strategy", None) != COORDINATED:
            raise ConfigError(
                "strategy",
                f"ClusterCoordinator schedules closures on a parameter server's workers; "
                f"{name} has none (run step functions with strategy.run)",
            )
        if strategy.settings.get("mode", "sync") != "async":
            raise ConfigError(
                "mode",
                f"ClusterCoordinator runs closures asynchronously, each pushing on its own; "
                f"make the strategy with {name}(..., mode='async')",
            )
        self.strategy = strategy
        self._scheduled: list[RemoteValue] = []
        self._count = 0

    def schedule(self, fn: Callable, args: tuple = (), kwargs: dict | None = None) -> RemoteValue:
        """Run ``fn(*args, **kwargs)`` on some worker, soon; returns its :class:`RemoteValue`.
        The first call starts the strategy's cluster."""
        kwargs = kwargs or {}
        if not isinstance(args, tuple | list):
            raise ConfigError("args", f"must be a tuple of arguments, got {type(args).__name__}")
        if contains_per_replica((tuple(args), kwargs)):
            raise ConfigError(
                "args",
                "a closure runs on one worker: give it one replica's value (per_replica.values"
                "[r]), not a PerReplica",
            )
        loop = self.strategy._running_loop("ClusterCoordinator.schedule")
        future = loop.schedule(fn, tuple(args), kwargs, self._count)
        value = RemoteValue(future, self._count, self.strategy.log)
        self._count += 1
        self._scheduled.append(value)
        return value

    def join(self) -> None:
        """Wait for every closure scheduled so far; raise the first error among them (the
        others still ran; each is raised once)."""
        scheduled, self._scheduled = self._scheduled, []
        first: BaseException | None = None
        for value in scheduled:
            try:
                value.fetch()
            except Exception as error:
                first = first or error
        if first is not None:
            raise first

    def done(self) -> bool:
        """Whether every closure scheduled so far has finished."""
        return all(value.done() for value in self._scheduled)

    def staleness(self) -> list[int]:
        """The staleness of every update the shards applied, in order (shard 0's count: each
        push reaches every shard): updates between a closure's pull and its push."""
        snapshots = self.strategy._running_loop("ClusterCoordinator.staleness").snapshots()
        return [int(s) for s in snapshots[0]["staleness"]]
