"""A parameter shard's one thread: the workers' messages and the client's calls in order."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from workbench.parallel.parameter_server.message_loop import MessageLoop


class _Transport:
    """What the loop uses of a ``PeerTransport``: no channels of its own, deliveries routed."""

    def __init__(self) -> None:
        self.own_channels: dict = {}
        self.deliveries: dict = {}

    def deliver_from(self, peer, deliver) -> None:
        self.deliveries[peer] = deliver


def test_messages_and_calls_run_on_the_loops_thread_in_the_order_they_came():
    transport = _Transport()
    loop = MessageLoop(transport, "test-shard")  # type: ignore[arg-type]
    handled = []
    loop.deliver_from(3, lambda peer, key, message: handled.append((peer, key, message)))
    try:
        transport.deliveries[3]("push/1", "g")  # as the event loop would, from another thread
        names = loop.submit(lambda: threading.current_thread().name).result(timeout=5)
        assert names == "test-shard"
        assert handled == [(3, "push/1", "g")]  # queued before the call, handled before it
        failed = loop.submit(lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            failed.result(timeout=5)
        assert loop.submit(lambda: "still serving").result(timeout=5) == "still serving"
    finally:
        loop.stop()
    loop._thread.join(5)
    assert not loop._thread.is_alive()


def test_a_stopped_loop_ends_its_thread_and_closes_its_pipe():
    loop = MessageLoop(SimpleNamespace(own_channels={}), "test-stop")  # type: ignore[arg-type]
    loop.stop()
    loop._thread.join(5)
    assert not loop._thread.is_alive()
