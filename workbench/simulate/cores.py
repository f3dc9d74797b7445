"""CPU work of several devices sharing a host's few cores, as an operating system shares them.

On a CPU cluster several device processes (workers, parameter-server shards, the client and
the scheduler) often run on one host with fewer cores than runnable processes. The model:
while ``k`` streams of a host's devices are doing CPU work and the host has ``c`` cores free
(its cores less the ``background`` load of processes outside the programs), each of those
streams progresses at rate ``min(1, c / k)``: ``k`` seconds of full-speed work take
``max(1, k / c)`` times as long, all ``k`` stretched alike. CPU work is a :class:`Compute` and
a :class:`Send`'s put time (on a CPU the sender copies or serialises the bytes); a stream
waiting on a receive, a signal, a busy link or a ring is not runnable and takes no share.

Why processor sharing and not first-come-first-served core slots: Linux's scheduler (CFS,
EEVDF) gives every runnable thread a time slice of a few milliseconds in turn, so over
anything longer than a few slices all runnable threads advance together at an equal share of
the cores, none waits for another to finish. That is what our measurements show: a
parameter-server worker's compute, 4.7 ms alone, takes 4.7 to 8.3 ms when two workers and a
shard share 2 cores, stretched, not delayed. A thread runs on one core at a time, hence the
``min(1, ...)``.

How it is computed: rates change only when CPU work starts or ends on that host, so each host
keeps a virtual clock that advances at the current rate. Work of ``w`` seconds starting at
virtual time ``v`` ends when the clock reaches ``v + w``, whatever the rates in between; the
host's next end is the smallest such tag, and its real time follows from the current rate.
An event costs O(log k), and a host never short of cores keeps its virtual clock equal to real
time, so its work ends exactly when it would without the model.

A :class:`RingAllReduce` with a member on a host of limited cores is played as its explicit
Send/Recv/Compute program (:func:`explicit_rings`), whose puts and adds then share the cores;
the vectorised ring cannot see other work on its members' hosts.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

from workbench.simulate.explicit_ring import explicit_ring
from workbench.simulate.programs import Action, Compute, Recv, RingAllReduce, Send

_Played = Compute | Send | Recv  # what an explicit ring is made of


def check_cores(
    hosts: Iterable[str], cores: Mapping[str, float], background: Mapping[str, float]
) -> None:
    """Raise ``ValueError`` unless ``cores`` and ``background`` name only hosts of
    ``hosts``, every host has more cores than its background load, and none is negative.

    Examples
    --------
    >>> check_cores(["h"], {"h": 2}, {"h": 2.5})
    Traceback (most recent call last):
    ...
    ValueError: host 'h': a background of 2.5 cores leaves none of its 2 for the programs
    """
    known = set(hosts)
    for what, mapping in (("cores", cores), ("background", background)):
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise ValueError(f"{what} names hosts no device is on: {', '.join(unknown)}")
    for host, count in cores.items():
        if not count > 0:
            raise ValueError(f"host {host!r}: cores must be > 0, got {count}")
    for host, load in background.items():
        if host not in cores:
            raise ValueError(f"host {host!r}: a background load needs the host's cores")
        if not 0 <= load < cores[host]:
            raise ValueError(
                f"host {host!r}: a background of {load:g} cores leaves none of its "
                f"{cores[host]:g} for the programs"
            )


@dataclass
class _Host:
    cores: float  # cores free for the programs' streams
    lag: float = 0.0  # real time minus virtual time; 0 while the host has never been short
    last: float = 0.0  # when the virtual clock was last brought up to date
    work: list[tuple[float, int, Hashable]] = field(default_factory=list)  # (end tag, seq, job)
    version: int = 0  # bumped whenever the host's next end moves

    def virtual(self, time: float) -> float:
        """Bring the virtual clock from ``last`` up to ``time`` at the current rate and
        return it (only between events, so the rate is constant over the span)."""
        running = len(self.work)
        if running > self.cores:
            now = self.last - self.lag + (time - self.last) * self.cores / running
            self.lag = time - now
        self.last = time
        return time - self.lag

    def next_end(self) -> float:
        """The real time the work with the smallest tag ends at the current rate."""
        tag, running = self.work[0][0], len(self.work)
        if running > self.cores:
            # Never before ``last``: rounding may leave the tag a hair behind the clock.
            return self.last + max(0.0, tag - (self.last - self.lag)) * running / self.cores
        return max(self.last, tag + self.lag)  # start + seconds while the host is not short


class SharedCores:
    """Processor-shared CPU work on the hosts of limited cores.

    :meth:`start` begins ``seconds`` of full-speed work for a job on a host; :meth:`next_end`
    says when the next job ends, :meth:`finish_next` ends it (and any ending at the same
    time). Jobs are any hashable the caller uses to know what ended.

    Examples
    --------
    Two jobs of 1 s on one core end together at 2 s; a third on an idle host ends at 1 s.

    >>> shared = SharedCores({"h": 1, "g": 1})
    >>> for job, host in (("a", "h"), ("b", "h"), ("c", "g")):
    ...     shared.start(host, 1.0, 0.0, job)
    >>> shared.finish_next(), shared.finish_next()
    ((1.0, ['c']), (2.0, ['a', 'b']))
    """

    def __init__(
        self, cores: Mapping[str, float], background: Mapping[str, float] | None = None
    ) -> None:
        taken = background or {}
        self.hosts = {host: _Host(count - taken.get(host, 0.0)) for host, count in cores.items()}
        # (real end, host, host's version): a host's entry is stale once its version moved on.
        self.ends: list[tuple[float, str, int]] = []
        self.started = 0
        self.running = 0  # jobs started and not ended

    def start(self, host: str, seconds: float, time: float, job: Hashable) -> None:
        """Begin ``seconds`` (> 0) of full-speed CPU work for ``job`` on ``host`` at
        ``time``, which is no earlier than the last event."""
        state = self.hosts[host]
        if state.work:
            tag = state.virtual(time) + seconds
        else:  # an idle host starts afresh: its virtual time is real time again
            state.lag, state.last, tag = 0.0, time, time + seconds
        heapq.heappush(state.work, (tag, self.started, job))
        self.started += 1
        self.running += 1
        self._schedule(host, state)

    def next_end(self) -> float:
        """When the next job ends (infinity when none runs)."""
        while self.ends and self.ends[0][2] != self.hosts[self.ends[0][1]].version:
            heapq.heappop(self.ends)  # superseded when the host's rate changed
        return self.ends[0][0] if self.ends else float("inf")

    def finish_next(self) -> tuple[float, list[Hashable]]:
        """End the next job and every other job of its host with the same tag: their end
        time and the jobs, in the order they started."""
        self.next_end()
        time, host, _ = heapq.heappop(self.ends)
        state = self.hosts[host]
        tag = state.work[0][0]
        # The virtual clock reached ``tag`` now by construction; setting it so keeps the
        # rounding of the rate's arithmetic from piling up.
        state.last, state.lag = time, time - tag
        ended = []
        while state.work and state.work[0][0] <= tag:
            ended.append(heapq.heappop(state.work))
        self.running -= len(ended)
        self._schedule(host, state)
        return time, [job for _, _, job in sorted(ended, key=lambda item: item[1])]

    def _schedule(self, host: str, state: _Host) -> None:
        state.version += 1
        if state.work:
            heapq.heappush(self.ends, (state.next_end(), host, state.version))


def explicit_rings(
    programs: Mapping[str, Sequence[Action]], expand: Callable[[RingAllReduce], bool]
) -> dict[str, list[Action]]:
    """``programs`` with every ring ``expand`` picks replaced by its explicit program
    (:func:`~workbench.simulate.explicit_ring.explicit_ring`), each member's part in the phase
    and stream its own action names.

    A ring that is not well formed (a member missing, members describing different rings)
    stays as it is, so the engine reports it as it would without cores.

    Examples
    --------
    >>> ring = RingAllReduce(("a", "b"), (1, 1), 4, 1024, 0.0, "g")
    >>> expanded = explicit_rings({"a": [ring], "b": [ring]}, lambda ring: True)
    >>> [action.key for action in expanded["a"]]
    ['g/rs0/0', 'g/rs0/0', 'g/ag0/0', 'g/ag0/0']
    """
    runs: dict[str, dict[str, RingAllReduce]] = defaultdict(dict)
    for device, actions in programs.items():
        for action in actions:
            if isinstance(action, RingAllReduce) and expand(action):
                runs[action.key][device] = action
    parts: dict[tuple[str, str], list[Action]] = {}
    for key, members in runs.items():
        ring = next(iter(members.values()))
        plain = replace(ring, phase="", stream="")
        if set(members) != set(ring.devices) or any(
            replace(action, phase="", stream="") != plain for action in members.values()
        ):
            continue
        for device, actions in explicit_ring(ring).items():
            own = members[device]
            if (own.phase, own.stream) != (ring.phase, ring.stream):
                actions = [
                    replace(cast(_Played, a), phase=own.phase, stream=own.stream) for a in actions
                ]
            parts[(device, key)] = actions
    expanded: dict[str, list[Action]] = {}
    for device, actions in programs.items():
        expanded[device] = []
        for action in actions:
            part = parts.get((device, action.key)) if isinstance(action, RingAllReduce) else None
            expanded[device] += [action] if part is None else part
    return expanded
