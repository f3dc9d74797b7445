"""The parameter-server protocol for one shard, as a sans-IO state machine.

Events in (:data:`ShardEvent`: :class:`Pull`, :class:`Push`, :class:`Forget`, :class:`Stop`),
instructions out (:data:`Instruction`: :class:`ApplyUpdate`, :class:`SendParameters`,
:class:`DropPush`, :class:`IgnoreDuplicate`). Both are closed unions dispatched with ``match``
and :func:`unhandled`, so a type checker reports a kind that a handler forgets. No sockets,
threads or clocks: the Dask adapter feeds it messages and carries out its instructions, and
tests drive it directly.

``sync``: a pull for step k is answered with the variables after k updates; the update for step
k is applied once every worker has pushed its step-k gradient (their mean), exactly like
synchronous data parallelism.

``async``: every push is applied as it arrives; its staleness is the number of updates applied
to this shard between the worker's read and its push. With a bound S (``--staleness``), a pull
is held back until granting it cannot let any outstanding read become staler than S: with V
updates applied, O the workers holding a read (read versions r), a new read is granted iff
``V + |O| - min(r ∪ {V}) <= S``. Each outstanding read can see at most one update per other
outstanding worker before its own push lands, so every applied update has staleness <= S.
S = 0 makes workers take turns (every gradient computed on the latest variables).

Pushes are deduplicated by (worker, step): at-least-once delivery never applies a step twice.

Free-running workers (async, or sync with backup workers) loop on their own until the run's
budget of updates (``total_updates``) is spent; from then on every pull is answered at once
and marked done, and a late push is dropped. ``backups`` B (sync): step k's update is the mean
of the first N - B pushes for step k, and later ones are dropped (Chen et al. 2016, "Revisiting
Distributed Synchronous SGD"); a pull asks for a step at least k and gets the newest. A worker
that died is forgotten (:class:`Forget`): its outstanding read no longer holds back the others'.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, NoReturn


@dataclass(frozen=True)
class Pull:
    worker: int
    step: int


@dataclass(frozen=True)
class Push:
    worker: int
    step: int
    read_version: int
    gradients: Any


@dataclass(frozen=True)
class Forget:
    """``worker`` is gone: drop its outstanding read and its waiting pulls."""

    worker: int


@dataclass(frozen=True)
class Stop:
    """Spend no more updates: the run was asked to stop."""


@dataclass(frozen=True)
class DropPush:
    """``worker``'s push for ``step`` came too late (a backup's, or past the budget)."""

    worker: int
    step: int


@dataclass(frozen=True)
class ApplyUpdate:
    """Apply the mean of ``gradients`` (in worker order) as update number ``version``."""

    gradients: tuple
    version: int
    staleness: tuple[int, ...]
    workers: tuple[int, ...]


@dataclass(frozen=True)
class SendParameters:
    """Reply to ``worker``'s pull with the variables after ``version`` updates."""

    worker: int
    step: int
    version: int


@dataclass(frozen=True)
class IgnoreDuplicate:
    """``worker``'s push for ``step`` was seen before (at-least-once delivery): nothing to do."""

    worker: int
    step: int


# What a shard is told, and what it answers with.
ShardEvent = Pull | Push | Forget | Stop
Instruction = ApplyUpdate | SendParameters | DropPush | IgnoreDuplicate


def unhandled(value: NoReturn) -> NoReturn:
    """The last ``case`` of a ``match`` over a closed union (``typing.assert_never``, which
    Python 3.10 lacks): a type checker accepts the call only where every kind was handled
    above it, and at run time anything else is refused by name."""
    raise TypeError(f"not handled here: {value!r}")


@dataclass
class ShardProtocol:
    workers: int
    mode: str = "sync"
    staleness_bound: int | None = None
    version: int = 0
    outstanding: dict[int, int] = field(default_factory=dict)  # worker -> version it read
    waiting: deque[Pull] = field(default_factory=deque)  # pulls not yet granted, oldest first
    pending: dict[int, dict[int, Any]] = field(
        default_factory=dict
    )  # sync: step -> worker -> grads
    applied: set[tuple[int, int]] = field(default_factory=set)  # (worker, step) seen
    staleness_log: list[int] = field(default_factory=list)
    total_updates: int | None = None  # free-running: the run's budget (None: the client's)
    backups: int = 0  # sync: pushes per step not waited for
    dropped: int = 0
    updates_by_worker: dict[int, int] = field(default_factory=dict)  # pushes applied

    def __post_init__(self) -> None:
        if self.mode not in ("sync", "async"):
            raise ValueError(f"mode must be sync or async, got {self.mode!r}")
        if self.workers < 1:
            raise ValueError("a shard needs at least one worker")
        if not 0 <= self.backups < self.workers:
            raise ValueError(f"backups must be 0 .. {self.workers - 1}, got {self.backups}")

    @property
    def done(self) -> bool:
        return self.total_updates is not None and self.version >= self.total_updates

    # --- events ------------------------------------------------------------------------------

    def handle(self, event: ShardEvent) -> list[Instruction]:
        match event:
            case Pull():
                self.waiting.append(event)
                return self._grant_pulls()
            case Forget(worker=gone):
                self.outstanding.pop(gone, None)
                self.waiting = deque(pull for pull in self.waiting if pull.worker != gone)
                return self._grant_pulls()
            case Stop():
                self.total_updates = self.version
                return self._grant_pulls()
            case Push():
                return self._push(event)
            case _:
                unhandled(event)

    def _push(self, event: Push) -> list[Instruction]:
        if (event.worker, event.step) in self.applied:
            return [IgnoreDuplicate(event.worker, event.step)]
        self.applied.add((event.worker, event.step))
        if self.done or (self.mode == "sync" and event.step < self.version):
            self.outstanding.pop(event.worker, None)
            self.dropped += 1
            return [DropPush(event.worker, event.step), *self._grant_pulls()]
        if self.mode == "sync":
            return self._sync_push(event)
        return self._async_push(event)

    # --- sync ----------------------------------------------------------------------------------

    def _sync_push(self, push: Push) -> list[Instruction]:
        if push.step != self.version:
            raise ValueError(
                f"worker {push.worker} pushed step {push.step} while the shard is at {self.version}"
            )
        arrived = self.pending.setdefault(push.step, {})
        arrived[push.worker] = push.gradients
        if len(arrived) < self.workers - self.backups:
            return []
        del self.pending[push.step]
        order = tuple(sorted(arrived))
        instructions: list[Instruction] = [
            ApplyUpdate(tuple(arrived[w] for w in order), self.version, (0,) * len(order), order)
        ]
        self.staleness_log.extend([0] * len(order))
        for worker in order:
            self.updates_by_worker[worker] = self.updates_by_worker.get(worker, 0) + 1
        self.version += 1
        return instructions + self._grant_pulls()

    # --- async ---------------------------------------------------------------------------------

    def _async_push(self, push: Push) -> list[Instruction]:
        staleness = self.version - push.read_version
        self.outstanding.pop(push.worker, None)
        instructions: list[Instruction] = [
            ApplyUpdate((push.gradients,), self.version, (staleness,), (push.worker,))
        ]
        self.staleness_log.append(staleness)
        self.updates_by_worker[push.worker] = self.updates_by_worker.get(push.worker, 0) + 1
        self.version += 1
        return instructions + self._grant_pulls()

    # --- pulls ---------------------------------------------------------------------------------

    def _may_grant(self, pull: Pull) -> bool:
        if self.done:
            return True  # answered at once, marked done: the worker's loop ends
        if self.mode == "sync":
            # A pull asks for step k or newer; with backups the newest may be past k.
            return pull.step <= self.version
        if self.staleness_bound is None:
            return True
        others = {w: r for w, r in self.outstanding.items() if w != pull.worker}
        oldest = min([*others.values(), self.version])
        return self.version + len(others) - oldest <= self.staleness_bound

    def _grant_pulls(self) -> list[Instruction]:
        if self.mode == "sync":
            # Every pull for the current version may go; pulls for the next step wait for the
            # update, which needs the slower workers' pushes, so they must not block them.
            ready = [pull for pull in self.waiting if self._may_grant(pull)]
            for pull in ready:
                self.waiting.remove(pull)
            return [SendParameters(p.worker, p.step, self.version) for p in ready]
        granted: list[Instruction] = []
        # Async: oldest first, stopping at the first pull that must wait (no overtaking, so no
        # starvation). Waiting here never blocks progress: the workers holding reads will push.
        while self.waiting and self._may_grant(self.waiting[0]):
            pull = self.waiting.popleft()
            if self.mode == "async" and not self.done:
                self.outstanding[pull.worker] = self.version
            granted.append(SendParameters(pull.worker, pull.step, self.version))
        return granted
