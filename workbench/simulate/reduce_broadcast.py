"""Programs for the rooted collectives: reduce to one device and broadcast from it.

As ``workbench/parallel/collectives/reduce_to_one.py`` runs them: every rank sends to the
root, which receives and adds in rank order; the root sends to each peer in rank order.
Reduce-to-one is the one, then the other (``allreduce_programs(..., "reduce-to-one")``). The
root's link is the bottleneck as N grows (it puts N-1 tensors one after another), where a ring
spreads the load.
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.simulate.programs import ALLREDUCE, Compute, Labels, Programs, Recv, Send


def reduce_programs(
    devices: Sequence[str],
    nbytes: int,
    add_seconds_per_byte: float,
    key: str,
    root: int = 0,
    labels: Labels = ALLREDUCE,
) -> Programs:
    """Every peer sends to ``devices[root]``, which receives and adds in rank order: the sum
    ends there (``{key}/reduce``).

    Examples
    --------
    >>> reduce_programs(["a", "b"], 8, 0.0, "g")["b"]
    [Send(to='a', nbytes=8, key='g/reduce', phase='allreduce', stream='main')]
    """
    top, message = devices[root], f"{key}/reduce"
    programs: Programs = {device: [] for device in devices}
    for peer in _peers(devices, top):
        programs[peer].append(Send(top, nbytes, message, labels.phase, labels.stream))
        programs[top].append(Recv(peer, message, labels.phase, labels.stream))
        if nbytes * add_seconds_per_byte > 0:
            add = Compute(nbytes * add_seconds_per_byte, "add", labels.phase, labels.stream)
            programs[top].append(add)
    return programs


def broadcast_programs(
    devices: Sequence[str], nbytes: int, key: str, root: int = 0, labels: Labels = ALLREDUCE
) -> Programs:
    """``devices[root]`` sends its tensor to each peer in rank order (``{key}/broadcast``).

    Examples
    --------
    >>> broadcast_programs(["a", "b"], 8, "v")["b"]
    [Recv(source='a', key='v/broadcast', phase='allreduce', stream='main')]
    """
    top, message = devices[root], f"{key}/broadcast"
    programs: Programs = {device: [] for device in devices}
    for peer in _peers(devices, top):
        programs[top].append(Send(peer, nbytes, message, labels.phase, labels.stream))
        programs[peer].append(Recv(top, message, labels.phase, labels.stream))
    return programs


def _peers(devices: Sequence[str], top: str) -> list[str]:
    """Everyone but the root, in rank order: the order the root takes them in."""
    return [device for device in devices if device != top]


def concat_programs(*parts: Programs) -> Programs:
    """Each device's actions from every part, part after part (several collectives, or the
    phases of one, in sequence).

    Examples
    --------
    >>> parts = {"a": [Compute(1.0, "x")]}, {"a": [Compute(2.0, "y")], "b": []}
    >>> concat_programs(*parts)["a"][1].label
    'y'
    """
    programs: Programs = {}
    for part in parts:
        for device, actions in part.items():
            programs.setdefault(device, []).extend(actions)
    return programs
