"""Checks on a set of programs before they run: mistakes a builder makes, named plainly.

A program that is well formed but can never finish (a receive nobody sends, a wait nobody
signals, two devices each waiting on the other) is not caught here: the engine runs it until
nothing can move and raises :class:`~workbench.simulate.plain_engine.DeadlockError`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from workbench.simulate.programs import Action, Compute, Recv, RingAllReduce, Send, Signal, Wait

ACTION_TYPES = (Compute, Send, Recv, Signal, Wait, RingAllReduce)


def check_programs(programs: Mapping[str, Sequence[Action]]) -> None:
    """Raise ``TypeError`` or ``ValueError`` naming the first malformed action.

    Malformed: not an action; a message to or from an unknown device or to itself; two sends
    (or two receives) of one message; a message sent but never received; a signal raised twice
    on one device; a ring the device is not a member of, or two rings with one key.

    Examples
    --------
    >>> check_programs({"a": [Send("b", 8, "x")], "b": []})
    Traceback (most recent call last):
    ...
    ValueError: a sends 'x' to b, but b never receives it
    """
    sends: Counter = Counter()
    receives: Counter = Counter()
    # Each ring's members as a set, made once per ring object (by id: ``programs`` holds every
    # action while this runs): every member's program holds the ring, and a described
    # cluster's rings have thousands of members.
    members: dict[int, frozenset[str]] = {}
    for device, actions in programs.items():
        signals: Counter = Counter()
        rings: Counter = Counter()
        for action in actions:
            if not isinstance(action, ACTION_TYPES):
                raise TypeError(f"{device}: {action!r} is not a simulator action")
            if isinstance(action, Send):
                _check_peer(programs, device, action.to, f"sends {action.key!r} to")
                sends[(device, action.to, action.key)] += 1
            elif isinstance(action, Recv):
                _check_peer(programs, device, action.source, f"receives {action.key!r} from")
                receives[(action.source, device, action.key)] += 1
            elif isinstance(action, Signal):
                signals[action.name] += 1
            elif isinstance(action, RingAllReduce):
                if id(action) not in members:
                    members[id(action)] = frozenset(action.devices)
                if device not in members[id(action)]:
                    raise ValueError(f"{device} runs ring {action.key!r} but is not a member")
                rings[action.key] += 1
        _no_repeats(signals, f"{device} signals {{!r}} more than once")
        _no_repeats(rings, f"{device} runs ring {{!r}} more than once")
    _no_repeats(sends, "{0[0]} sends {0[2]!r} to {0[1]} more than once")
    _no_repeats(receives, "{0[1]} receives {0[2]!r} from {0[0]} more than once")
    for source, destination, key in sends:
        if (source, destination, key) not in receives:
            raise ValueError(
                f"{source} sends {key!r} to {destination}, but {destination} never receives it"
            )


def _check_peer(programs: Mapping, device: str, peer: str, what: str) -> None:
    if peer == device:
        raise ValueError(f"{device} {what} itself")
    if peer not in programs:
        raise ValueError(f"{device} {what} {peer}, which has no program")


def _no_repeats(counts: Counter, message: str) -> None:
    for item, count in counts.items():
        if count > 1:
            raise ValueError(message.format(item))
