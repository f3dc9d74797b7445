"""Where a simulation starts: :func:`simulate` checks the programs and runs them.

The engine itself is :mod:`~workbench.simulate.plain_engine`: how events are ordered, how
messages and rings are played, when a program is deadlocked. Given ``cores``,
:mod:`~workbench.simulate.shared_engine` runs them instead, its devices sharing their hosts'
cores as :mod:`~workbench.simulate.cores` models it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from workbench.simulate.links import LinkModel
from workbench.simulate.plain_engine import DeadlockError, Engine
from workbench.simulate.program_checks import check_programs
from workbench.simulate.programs import Action
from workbench.simulate.shared_engine import simulate_shared
from workbench.simulate.timeline import Timeline

__all__ = ["DeadlockError", "simulate"]


def simulate(
    programs: Mapping[str, Sequence[Action]],
    link: LinkModel,
    cores: Mapping[str, float] | None = None,
    *,
    host_of: Callable[[str], str] | None = None,
    background: Mapping[str, float] | None = None,
) -> Timeline:
    """Run one program per device over the links ``link(source, destination)`` describes.

    ``cores`` (host -> its number of cores) makes the CPU work of the devices on those hosts
    share them, as :mod:`~workbench.simulate.cores` describes: ``host_of(device)`` names a
    device's host (default: the device itself, each on its own host) and ``background``
    (host -> cores) what processes outside the programs keep busy there, such as a client and
    a scheduler. A host not in ``cores`` has as many cores as its devices need; without
    ``cores`` every device runs at full speed, the same timelines as before the model.

    Examples
    --------
    Device ``a`` computes for 1 s, then sends 1 MB over a 1 MB/s link of 0.5 s latency: the
    message is put from 1 s to 2 s and arrives at 2.5 s, when ``b``'s receive ends.

    >>> from workbench.simulate.links import Link, uniform
    >>> from workbench.simulate.programs import Compute, Recv, Send
    >>> programs = {"a": [Compute(1.0, "work"), Send("b", 10**6, "x")], "b": [Recv("a", "x")]}
    >>> one_mb_per_second = uniform(Link(latency=0.5, bandwidth=1e6))
    >>> timeline = simulate(programs, one_mb_per_second)
    >>> [(i.device, i.kind, i.start, i.end) for i in timeline.intervals]
    [('a', 'compute', 0.0, 1.0), ('a', 'send', 1.0, 2.0), ('b', 'recv', 0.0, 2.5)]
    >>> timeline.makespan
    2.5

    With ``b`` computing 1 s too, both on one host of one core, each gets half of it: both
    computes end at 2 s, and ``a``'s put, alone on the core again, at 3 s.

    >>> programs["b"].insert(0, Compute(1.0, "work"))
    >>> timeline = simulate(programs, one_mb_per_second, {"host": 1}, host_of=lambda d: "host")
    >>> for i in timeline.intervals:
    ...     print(i.device, i.kind, i.start, i.end)
    a compute 0.0 2.0
    b compute 0.0 2.0
    a send 2.0 3.0
    b recv 2.0 3.5
    """
    check_programs(programs)
    if cores is None and background is None:
        return Engine(programs, link).run()
    return simulate_shared(programs, link, cores or {}, host_of, background or {})
