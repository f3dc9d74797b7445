"""Where a simulation starts: :func:`simulate` checks the programs and runs them.

The engine itself is :mod:`~workbench.simulate.plain_engine`: how events are ordered, how
messages and rings are played, when a program is deadlocked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from workbench.simulate.links import LinkModel
from workbench.simulate.plain_engine import DeadlockError, Engine
from workbench.simulate.program_checks import check_programs
from workbench.simulate.programs import Action
from workbench.simulate.timeline import Timeline

__all__ = ["DeadlockError", "simulate"]


def simulate(programs: Mapping[str, Sequence[Action]], link: LinkModel) -> Timeline:
    """Run one program per device over the links ``link(source, destination)`` describes.

    Examples
    --------
    Device ``a`` computes for 1 s, then sends 1 MB over a 1 MB/s link of 0.5 s latency: the
    message is put from 1 s to 2 s and arrives at 2.5 s, when ``b``'s receive ends.

    >>> from workbench.simulate.links import Link, uniform
    >>> from workbench.simulate.programs import Compute, Recv, Send
    >>> timeline = simulate(
    ...     {"a": [Compute(1.0, "work"), Send("b", 10**6, "x")], "b": [Recv("a", "x")]},
    ...     uniform(Link(latency=0.5, bandwidth=1e6)),
    ... )
    >>> [(i.device, i.kind, i.start, i.end) for i in timeline.intervals]
    [('a', 'compute', 0.0, 1.0), ('a', 'send', 1.0, 2.0), ('b', 'recv', 0.0, 2.5)]
    >>> timeline.makespan
    2.5
    """
    check_programs(programs)
    return Engine(programs, link).run()
