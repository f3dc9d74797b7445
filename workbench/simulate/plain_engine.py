"""The discrete-event engine, every device at full speed: programs and links in, a timeline out.

Every stream of every device holds one pending action. A priority queue holds, for each stream
that can go on, the time it is ready and which action is next; the engine pops the earliest,
runs that action (busy until some time, or blocked on a message, a signal or the other members
of a ring) and queues what becomes ready. Ties go by device order (the programs' order), then by
action order, so the same inputs give the same timeline. When the queue is empty and some
stream has not finished, nothing will ever move it: :class:`DeadlockError` names them.

A :class:`RingAllReduce` waits until every member has reached it, then
:mod:`~workbench.simulate.lockstep_ring` plays the whole ring from each member's arrival time;
the times are the explicit ring's unless other traffic uses the ring's links while it runs.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from workbench.simulate.links import Link, LinkModel
from workbench.simulate.lockstep_ring import ring_steps, simulate_ring
from workbench.simulate.programs import (
    Action,
    Compute,
    Recv,
    RingAllReduce,
    Send,
    Signal,
    Wait,
    describe_action,
)
from workbench.simulate.timeline import Interval, Timeline


class DeadlockError(RuntimeError):
    """Some streams can never finish; ``stuck`` maps (device, stream) to the action each
    waits on."""

    def __init__(self, stuck: dict[tuple[str, str], str]) -> None:
        self.stuck = stuck
        lines = [f"{device} [{stream}] waits on {what}" for (device, stream), what in stuck.items()]
        super().__init__("deadlock, no stream can go on: " + "; ".join(lines))


class Engine:
    """Runs checked programs over a link model: ``Engine(programs, link).run()`` gives the
    :class:`Timeline` (see :func:`~workbench.simulate.engine.simulate`).

    Examples
    --------
    >>> from workbench.simulate.links import uniform
    >>> Engine({"a": [Compute(1.0, "work")]}, uniform(Link(0.0, 1e9))).run().finish
    {'a': 1.0}
    """

    def __init__(self, programs: Mapping[str, Sequence[Action]], link: LinkModel) -> None:
        self.devices = list(programs)
        self.number = {name: number for number, name in enumerate(self.devices)}
        self.actions = [list(programs[device]) for device in self.devices]
        self.link_model = link
        self.links: dict[tuple[str, str], Link] = {}
        self.link_free: dict[tuple[str, str], float] = defaultdict(float)
        self.queue: list[tuple[float, int, int]] = []
        self.next_in_stream: list[list[int]] = []
        self.pending: dict[tuple[int, str], int] = {}  # (device, stream) -> its action now
        for device, actions in enumerate(self.actions):
            following = [-1] * len(actions)
            last_of: dict[str, int] = {}
            for index, action in enumerate(actions):
                if action.stream in last_of:
                    following[last_of[action.stream]] = index
                else:
                    self._ready(0.0, device, index)
                last_of[action.stream] = index
            self.next_in_stream.append(following)
        self.finish = [0.0] * len(self.devices)
        self.intervals: list[Interval] = []
        self.arrivals: dict[tuple[str, str, str], tuple[float, int]] = {}
        self.waiting_receives: dict[tuple[str, str, str], tuple[int, int, float]] = {}
        self.signalled: dict[tuple[int, str], float] = {}
        self.waiting_signals: dict[tuple[int, str], list[tuple[int, float]]] = defaultdict(list)
        self.ring_arrivals: dict[str, dict[int, tuple[int, float]]] = defaultdict(dict)
        self.events = 0
        # What runs an action, by its type: bound here, so a subclass's override is the one run.
        self.handlers: dict[type, Callable[[int, int, Any, float], None]] = {
            Compute: self._compute,
            Send: self._send,
            Recv: self._receive,
            Signal: self._signal,
            Wait: self._wait,
            RingAllReduce: self._join_ring,
        }

    def run(self) -> Timeline:
        queue, actions, handlers, pop = self.queue, self.actions, self.handlers, heapq.heappop
        while queue:  # _step, inlined: the loop runs once per event
            time, device, index = pop(queue)
            self.events += 1
            action = actions[device][index]
            handlers[type(action)](device, index, action, time)
        return self._timeline()

    def _step(self, time: float, device: int, index: int) -> None:
        """Action ``index`` of ``device`` is next on its stream at ``time``: run it (for an
        engine whose loop has other events to interleave)."""
        self.events += 1
        action = self.actions[device][index]
        self.handlers[type(action)](device, index, action, time)

    def _timeline(self) -> Timeline:
        """What the run produced, once nothing is left to do; a stream still pending then can
        never finish."""
        if self.pending:
            raise DeadlockError(
                {
                    (self.devices[device], stream): describe_action(self.actions[device][index])
                    for (device, stream), index in sorted(self.pending.items())
                }
            )
        finish = dict(zip(self.devices, self.finish))
        return Timeline(tuple(self.intervals), finish, self.events)

    def _ready(self, time: float, device: int, index: int) -> None:
        heapq.heappush(self.queue, (time, device, index))
        self.pending[(device, self.actions[device][index].stream)] = index

    def _done(self, device: int, index: int, time: float) -> None:
        """Action ``index`` of ``device`` ended at ``time``: its stream goes on."""
        following = self.next_in_stream[device][index]
        if following >= 0:
            self._ready(time, device, following)
        else:
            del self.pending[(device, self.actions[device][index].stream)]
            self.finish[device] = max(self.finish[device], time)

    def _record(
        self,
        device: int,
        action: Compute | Send | Recv | RingAllReduce,
        label: str,
        span: tuple[float, float],
        kind: str,
        sent: int = 0,
        received: int = 0,
    ) -> None:
        self.intervals.append(
            Interval(
                self.devices[device],
                action.stream,
                action.phase,
                label,
                *span,
                kind,
                sent,
                received,
            )
        )

    def _link(self, source: str, destination: str) -> Link:
        pair = (source, destination)
        if pair not in self.links:
            self.links[pair] = self.link_model(source, destination)
        return self.links[pair]

    def _compute(self, device: int, index: int, action: Compute, time: float) -> None:
        end = time + action.seconds
        self._record(device, action, action.label, (time, end), "compute")
        self._done(device, index, end)

    def _send(self, device: int, index: int, action: Send, time: float) -> None:
        pair = (self.devices[device], action.to)
        link = self._link(*pair)
        put_end = max(time, self.link_free[pair]) + action.nbytes / link.bandwidth
        self.link_free[pair] = put_end
        self._record(device, action, action.key, (time, put_end), "send", sent=action.nbytes)
        self._put(device, index, action, put_end, put_end + link.latency)

    def _put(self, device: int, index: int, action: Send, put_end: float, arrival: float) -> None:
        """``action`` has put its last byte on the link at ``put_end``: the sender goes on,
        the message arrives at ``arrival``."""
        message = (self.devices[device], action.to, action.key)
        self.arrivals[message] = (arrival, action.nbytes)
        self._done(device, index, put_end)
        if message in self.waiting_receives:
            receiver, receive_index, posted = self.waiting_receives.pop(message)
            self._received(receiver, receive_index, posted, arrival, action.nbytes)

    def _receive(self, device: int, index: int, action: Recv, time: float) -> None:
        message = (action.source, self.devices[device], action.key)
        if message in self.arrivals:
            self._received(device, index, time, *self.arrivals[message])
        else:
            self.waiting_receives[message] = (device, index, time)

    def _received(self, device: int, index: int, posted: float, arrival: float, nbytes: int):
        action = cast(Recv, self.actions[device][index])
        end = max(posted, arrival)
        self._record(device, action, action.key, (posted, end), "recv", received=nbytes)
        self._done(device, index, end)

    def _signal(self, device: int, index: int, action: Signal, time: float) -> None:
        self.signalled[(device, action.name)] = time
        for waiter, posted in self.waiting_signals.pop((device, action.name), []):
            self._done(device, waiter, max(posted, time))
        self._done(device, index, time)

    def _wait(self, device: int, index: int, action: Wait, time: float) -> None:
        if (device, action.name) in self.signalled:
            self._done(device, index, max(time, self.signalled[(device, action.name)]))
        else:
            self.waiting_signals[(device, action.name)].append((index, time))

    def _join_ring(self, device: int, index: int, ring: RingAllReduce, time: float) -> None:
        """A member reached the ring; when the last one has, play it for all of them."""
        joined = self.ring_arrivals[ring.key]
        joined[device] = (index, time)
        if len(joined) < len(ring.devices):
            return
        del self.ring_arrivals[ring.key]
        members = [self.number[name] for name in ring.devices]
        if set(joined) != set(members) or not all(
            ring.same_ring(cast(RingAllReduce, self.actions[m][joined[m][0]])) for m in members
        ):
            raise ValueError(f"ring {ring.key!r}: its members describe different rings")
        pairs = [
            (name, ring.devices[(r + 1) % len(members)]) for r, name in enumerate(ring.devices)
        ]
        links = [self._link(*pair) for pair in pairs]
        result = simulate_ring(
            np.array([joined[m][1] for m in members]),
            np.array([self.link_free[pair] for pair in pairs]),
            np.array([link.latency for link in links]),
            np.array([link.bandwidth for link in links]),
            np.array(ring.chunk_elements),
            ring.itemsize,
            ring.slice_elements,
            ring.add_seconds_per_byte,
            ring_steps(len(members), ring.part),
        )
        self.events += result.rounds
        for rank, member in enumerate(members):
            self.link_free[pairs[rank]] = float(result.link_free[rank])
            member_index, start = joined[member]
            end = float(result.finish[rank])
            sent, received = int(result.sent[rank]), int(result.received[rank])
            action = cast(RingAllReduce, self.actions[member][member_index])
            self._record(member, action, ring.key, (start, end), "collective", sent, received)
            self._done(member, member_index, end)
