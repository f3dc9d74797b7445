"""The actions a device's program is made of.

A program is the ordered list of actions one device performs in a step. Every action names the
``stream`` it runs on: the actions of one (device, stream) run one after another in program
order, different streams of one device run concurrently (a GPU's compute and communication
streams; a worker's main thread and its communication thread). ``phase`` and ``label`` only
name what the timeline shows.

- :class:`Compute`: the stream is busy for ``seconds``.
- :class:`Send` / :class:`Recv`: a message ``key`` from one device to another (see
  :mod:`workbench.simulate.links` for how long it takes).
- :class:`Signal` / :class:`Wait`: an order between two streams of one device, e.g. the
  communication stream starts a bucket's all-reduce once backward has produced the bucket.
- :class:`RingAllReduce`: a whole ring all-reduce as one action on every member, simulated for
  all ranks at once (:mod:`workbench.simulate.lockstep_ring`), so a ring over thousands of
  devices costs seconds, not hours.
  :func:`workbench.simulate.collectives.ring_allreduce_programs` builds it, or the equivalent
  explicit Send/Recv/Compute lists.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

MAIN = "main"


@dataclass(frozen=True)
class Compute:
    """Busy for ``seconds`` on ``stream``. ``cpu``: whether the work takes one of its host's
    cores (shared with the host's other busy streams); False for time the programs spend
    without computing, e.g. a collective timed as a whole, most of it waiting on the network
    and the peers (its own share of the cores was in what was timed).

    Examples
    --------
    >>> Compute(0.5, "F0")
    Compute(seconds=0.5, label='F0', phase='compute', stream='main', cpu=True)
    """

    seconds: float
    label: str
    phase: str = "compute"
    stream: str = MAIN
    cpu: bool = True

    def __post_init__(self) -> None:
        if not self.seconds >= 0:
            raise ValueError(f"Compute {self.label!r}: seconds must be >= 0, got {self.seconds}")


@dataclass(frozen=True)
class Send:
    """Put ``nbytes`` on the link to device ``to``, as message ``key``.

    Examples
    --------
    >>> Send("gpu1", 1024, "a0").stream
    'main'
    """

    to: str
    nbytes: int
    key: str
    phase: str = "send"
    stream: str = MAIN

    def __post_init__(self) -> None:
        if self.nbytes < 0:
            raise ValueError(f"Send {self.key!r}: nbytes must be >= 0, got {self.nbytes}")


@dataclass(frozen=True)
class Recv:
    """Wait until message ``key`` from device ``source`` has arrived.

    Examples
    --------
    >>> Recv("gpu0", "a0").phase
    'recv'
    """

    source: str
    key: str
    phase: str = "recv"
    stream: str = MAIN


@dataclass(frozen=True)
class _Mark:
    """A named point between the streams of one device (see :class:`Signal`)."""

    name: str
    stream: str = MAIN


@dataclass(frozen=True)
class Signal(_Mark):
    """Mark ``name`` done on this device, at once; :class:`Wait` s for it on other streams
    may go on.

    Examples
    --------
    >>> Signal("bucket0", stream="backward").name
    'bucket0'
    """


@dataclass(frozen=True)
class Wait(_Mark):
    """Block this stream until this device has signalled ``name``.

    Examples
    --------
    >>> Wait("bucket0", stream="communication").stream
    'communication'
    """


RingPart = Literal["all", "reduce-scatter", "all-gather"]
RING_PARTS: tuple[RingPart, ...] = ("all", "reduce-scatter", "all-gather")


@dataclass(frozen=True)
class RingAllReduce:
    """One ring all-reduce over ``devices`` (in ring order), every member running this same
    action; it starts on each member when that member reaches it.

    ``chunk_elements`` is what each rank's chunk holds (the real code's split),
    ``slice_elements`` the most a message carries, ``add_seconds_per_byte`` the cost of adding
    a received byte in the reduce-scatter.

    Examples
    --------
    >>> ring = RingAllReduce(("a", "b"), (2, 2), 4, 1024, 0.0, "g")
    >>> ring.nbytes
    16
    """

    devices: tuple[str, ...]
    chunk_elements: tuple[int, ...]
    itemsize: int
    slice_elements: int
    add_seconds_per_byte: float
    key: str
    phase: str = "allreduce"
    stream: str = MAIN
    # Which steps it plays: both halves, or one (a sharded step's reduce-scatter of gradients
    # or all-gather of parameters).
    part: RingPart = "all"

    def __post_init__(self) -> None:
        if len(self.devices) < 2 or len(set(self.devices)) != len(self.devices):
            raise ValueError(f"ring {self.key!r}: needs two or more distinct devices")
        if self.part not in RING_PARTS:
            raise ValueError(f"ring {self.key!r}: part {self.part!r} is not one of {RING_PARTS}")
        if len(self.chunk_elements) != len(self.devices) or min(self.chunk_elements) < 0:
            raise ValueError(f"ring {self.key!r}: needs one chunk size (>= 0) per device")
        if self.itemsize < 1 or self.slice_elements < 1:
            raise ValueError(f"ring {self.key!r}: itemsize and slice_elements must be >= 1")

    @property
    def nbytes(self) -> int:
        return sum(self.chunk_elements) * self.itemsize

    def same_ring(self, other: RingAllReduce) -> bool:
        """Whether ``other`` describes this ring, wherever it shows (``phase`` and ``stream``
        are each member's own): compared field by field, without building a copy, whose
        checks would walk every member again (thousands on a described cluster).

        Examples
        --------
        >>> ring = RingAllReduce(("a", "b"), (2, 2), 4, 1024, 0.0, "g")
        >>> ring.same_ring(RingAllReduce(("a", "b"), (2, 2), 4, 1024, 0.0, "g", stream="c"))
        True
        >>> ring.same_ring(RingAllReduce(("b", "a"), (2, 2), 4, 1024, 0.0, "g"))
        False
        """
        return other is self or all(
            getattr(self, name) == getattr(other, name) for name in _RING_IDENTITY
        )


# What makes two members' actions one ring: every field but where each member shows it.
_RING_IDENTITY = tuple(f.name for f in fields(RingAllReduce) if f.name not in ("phase", "stream"))

Action = Compute | Send | Recv | Signal | Wait | RingAllReduce
Programs = dict[str, list[Action]]  # each device's program, by device


@dataclass(frozen=True)
class Labels:
    """Where a collective's actions show and run: their ``phase`` on the timeline and the
    ``stream`` of each device they take turns on.

    Examples
    --------
    >>> Labels(stream="communication")
    Labels(phase='allreduce', stream='communication')
    """

    phase: str = "allreduce"
    stream: str = MAIN


ALLREDUCE = Labels()


def describe_action(action: Action) -> str:
    """A short human description of an action, as error messages name it.

    Examples
    --------
    >>> describe_action(Recv("gpu0", "a3"))
    "Recv 'a3' from gpu0"
    """
    if isinstance(action, Compute):
        return f"Compute {action.label!r} ({action.seconds:g} s)"
    if isinstance(action, Send):
        return f"Send {action.key!r} to {action.to}"
    if isinstance(action, Recv):
        return f"Recv {action.key!r} from {action.source}"
    if isinstance(action, Signal):
        return f"Signal {action.name!r}"
    if isinstance(action, Wait):
        return f"Wait {action.name!r}"
    return f"RingAllReduce {action.key!r} over {len(action.devices)} devices"
