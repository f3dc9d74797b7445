"""The engine with CPU work shared among the devices of hosts of limited cores.

:func:`~workbench.simulate.engine.simulate` hands its programs here when it is given
``cores``; :mod:`~workbench.simulate.cores` has the model and why. Devices on hosts not in
``cores`` run exactly as in the plain engine.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import cast

from workbench.simulate.cores import SharedCores, check_cores, explicit_rings
from workbench.simulate.links import LinkModel
from workbench.simulate.plain_engine import Engine
from workbench.simulate.program_checks import check_programs
from workbench.simulate.programs import Action, Compute, Send
from workbench.simulate.timeline import Timeline


def simulate_shared(
    programs: Mapping[str, Sequence[Action]],
    link: LinkModel,
    cores: Mapping[str, float],
    host_of: Callable[[str], str] | None,
    background: Mapping[str, float],
) -> Timeline:
    """:func:`~workbench.simulate.engine.simulate` with ``cores``, for programs it has
    checked.

    Examples
    --------
    Three devices on two cores, each computing 1 s: each gets two thirds of a core.

    >>> from workbench.simulate.links import Link, uniform
    >>> programs = {device: [Compute(1.0, "work")] for device in "abc"}
    >>> timeline = simulate_shared(
    ...     programs, uniform(Link(0.0, 1e9)), {"h": 2}, lambda device: "h", {}
    ... )
    >>> timeline.finish
    {'a': 1.5, 'b': 1.5, 'c': 1.5}
    """
    hosts = {device: host_of(device) if host_of else device for device in programs}
    check_cores(hosts.values(), cores, background)
    limited = {device for device, host in hosts.items() if host in cores}
    if not limited:
        return Engine(programs, link).run()
    programs = explicit_rings(programs, lambda ring: not limited.isdisjoint(ring.devices))
    check_programs(programs)  # an explicit ring's keys could clash with the programs' own
    return SharedEngine(programs, link, SharedCores(cores, background), hosts, limited).run()


class SharedEngine(Engine):
    """The engine with the CPU work of devices on hosts of limited cores shared among them.

    Such work (a compute, a send's put) starts a job on :class:`SharedCores` instead of
    ending at a time known in advance; the run loop takes the next job end or the next ready
    action, whichever is earlier (a job end first on a tie: it frees a core before the work
    starting then asks for one). A job's interval is recorded when it ends.
    """

    def __init__(
        self,
        programs: Mapping[str, Sequence[Action]],
        link: LinkModel,
        shared: SharedCores,
        hosts: Mapping[str, str],
        limited: set[str],
    ) -> None:
        super().__init__(programs, link)
        self.shared = shared
        # Device number -> host, for the devices on hosts of limited cores only.
        self.hosts = {self.number[d]: hosts[d] for d in self.devices if d in limited}
        # Per directed link of a limited host: its sends (device, index, when posted) in
        # posting order, the first being put.
        self.putting: dict[tuple[str, str], deque[tuple[int, int, float]]] = defaultdict(deque)

    def run(self) -> Timeline:
        while self.queue or self.shared.running:
            if self.queue and self.queue[0][0] < self.shared.next_end():
                self._step(*heapq.heappop(self.queue))
                continue
            self.events += 1
            time, jobs = self.shared.finish_next()
            # each job is the (device, index, started) this engine started it with
            for device, index, started in cast(list[tuple[int, int, float]], jobs):
                self._job_ended(device, index, started, time)
        return self._timeline()

    def _compute(self, device: int, index: int, action: Compute, time: float) -> None:
        host = self.hosts.get(device)
        if host is None or action.seconds == 0 or not action.cpu:
            super()._compute(device, index, action, time)
            return
        self.shared.start(host, action.seconds, time, (device, index, time))

    def _send(self, device: int, index: int, action: Send, time: float) -> None:
        if device not in self.hosts:
            super()._send(device, index, action, time)
            return
        pair = (self.devices[device], action.to)
        self.putting[pair].append((device, index, time))
        if len(self.putting[pair]) == 1:  # the link is free: put now, else after those before
            self._put_next(pair, time)

    def _put_next(self, pair: tuple[str, str], time: float) -> None:
        """The link ``pair`` is free at ``time``: start putting the first waiting send's bytes
        (one with none is put at once, and the next goes on)."""
        waiting = self.putting[pair]
        while waiting:
            device, index, posted = waiting[0]
            seconds = cast(Send, self.actions[device][index]).nbytes / self._link(*pair).bandwidth
            if seconds > 0:
                self.shared.start(self.hosts[device], seconds, time, waiting[0])
                return
            waiting.popleft()
            self._sent(device, index, posted, time)

    def _job_ended(self, device: int, index: int, started: float, time: float) -> None:
        """The CPU work of action ``index`` of ``device``, started (or posted) at ``started``,
        ended at ``time``."""
        action = self.actions[device][index]
        if isinstance(action, Compute):
            self._record(device, action, action.label, (started, time), "compute")
            self._done(device, index, time)
            return
        pair = (self.devices[device], cast(Send, action).to)  # CPU work is a compute or a put
        self.putting[pair].popleft()
        self._sent(device, index, started, time)
        self._put_next(pair, time)

    def _sent(self, device: int, index: int, posted: float, time: float) -> None:
        action = self.actions[device][index]
        assert isinstance(action, Send)  # only sends wait for their link
        self._record(device, action, action.key, (posted, time), "send", sent=action.nbytes)
        arrival = time + self._link(self.devices[device], action.to).latency
        self._put(device, index, action, time, arrival)
