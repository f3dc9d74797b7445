"""Programs for the rooted collectives: reduce to one device, broadcast from it, and both.

As ``workbench/parallel/collectives/reduce_to_one.py`` runs them: every rank sends to the
root, which receives and adds in rank order; the root sends to each peer in rank order. The
root's link is the bottleneck as N grows (it puts N-1 tensors one after another), where a ring
spreads the load.
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.simulate.programs import MAIN, Action, Compute, Recv, Send

Programs = dict[str, list[Action]]


def reduce_to_one(
    devices: Sequence[str],
    nbytes: int,
    add_seconds_per_byte: float,
    key: str,
    root: int = 0,
    *,
    phase: str = "allreduce",
    stream: str = MAIN,
) -> Programs:
    """Everyone sends to the root, which receives and adds in rank order, then sends the sum
    to each peer in rank order (``reduce_to_one.py``: ``{key}/reduce``, ``{key}/broadcast``).

    Examples
    --------
    >>> [type(a).__name__ for a in reduce_to_one(["a", "b"], 8, 1e-9, "g")["a"]]
    ['Recv', 'Compute', 'Send']
    """
    return concat(
        reduce(devices, nbytes, add_seconds_per_byte, key, root, phase=phase, stream=stream),
        broadcast(devices, nbytes, key, root, phase=phase, stream=stream),
    )


def reduce(
    devices: Sequence[str],
    nbytes: int,
    add_seconds_per_byte: float,
    key: str,
    root: int = 0,
    *,
    phase: str = "allreduce",
    stream: str = MAIN,
) -> Programs:
    """The reduce half of :func:`reduce_to_one`: the sum ends on ``devices[root]``.

    Examples
    --------
    >>> reduce(["a", "b"], 8, 0.0, "g")["b"]
    [Send(to='a', nbytes=8, key='g/reduce', phase='allreduce', stream='main')]
    """
    programs: Programs = {device: [] for device in devices}
    if len(devices) == 1:
        return programs
    top = devices[root]
    for peer in devices:
        if peer == top:
            continue
        programs[peer].append(Send(top, nbytes, f"{key}/reduce", phase, stream))
        programs[top].append(Recv(peer, f"{key}/reduce", phase, stream))
        if nbytes * add_seconds_per_byte > 0:
            programs[top].append(Compute(nbytes * add_seconds_per_byte, "add", phase, stream))
    return programs


def broadcast(
    devices: Sequence[str],
    nbytes: int,
    key: str,
    root: int = 0,
    *,
    phase: str = "allreduce",
    stream: str = MAIN,
) -> Programs:
    """``devices[root]`` sends its tensor to each peer in rank order (``{key}/broadcast``).

    Examples
    --------
    >>> broadcast(["a", "b"], 8, "v")["b"]
    [Recv(source='a', key='v/broadcast', phase='allreduce', stream='main')]
    """
    programs: Programs = {device: [] for device in devices}
    top = devices[root]
    for peer in devices:
        if peer != top:
            programs[top].append(Send(peer, nbytes, f"{key}/broadcast", phase, stream))
            programs[peer].append(Recv(top, f"{key}/broadcast", phase, stream))
    return programs


def concat(*parts: Programs) -> Programs:
    """Each device's actions from every part, part after part (several collectives, or the
    phases of one, in sequence).

    Examples
    --------
    >>> concat({"a": [Compute(1.0, "x")]}, {"a": [Compute(2.0, "y")], "b": []})["a"][1].label
    'y'
    """
    programs: Programs = {}
    for part in parts:
        for device, actions in part.items():
            programs.setdefault(device, []).extend(actions)
    return programs
