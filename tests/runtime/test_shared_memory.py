"""Shared-memory channels between workers on one host: what the sender writes is what the
receiver takes, the sender never waits for a receiver that is busy, segments are reused and
grown, everything lies in the run's private directory, and nothing outlives its run."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import numpy as np
import pytest

from workbench.runtime import shared_memory, shared_memory_channel
from workbench.runtime.shared_memory import (
    LOCK_NAME,
    has_room,
    run_directory,
    unlink_run_segments,
)
from workbench.runtime.shared_memory_channel import (
    ChannelReceiver,
    ChannelRegistry,
    ChannelSender,
    ChannelStalled,
    SharedMessage,
)


def _objects(run_id: str) -> list[str]:
    try:
        return sorted(set(os.listdir(run_directory(run_id))) - {LOCK_NAME})
    except FileNotFoundError:
        return []


class Pair:
    """Both ends of one channel in this process; the test plays the event loop."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.inbox: dict[str, SharedMessage] = {}
        self.sender = ChannelSender(run_id, 0, 1)
        self.receiver = ChannelReceiver(run_id, 0, 1, self.inbox.__setitem__)

    def send(self, key: str, array: np.ndarray) -> None:
        self.sender.send(key, array, timeout=1.0)

    def take(self, key: str) -> SharedMessage:
        self.receiver.on_readable()
        return self.inbox.pop(key)

    def segments(self) -> list[str]:
        return [n for n in _objects(self.run_id) if not n.endswith(("-ready", "-done", "-probe"))]

    def close(self) -> None:
        self.inbox.clear()
        self.receiver.close()
        self.sender.close()


@pytest.fixture
def pair(request):
    channel = Pair(f"test-{request.node.name[-20:]}-{os.getpid()}")
    yield channel
    channel.close()
    unlink_run_segments(channel.run_id)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.linspace(-1, 1, 7, dtype=np.float64),
        np.array(3.5, dtype=np.float16),
        np.arange(6, dtype=np.int64)[::2],  # not contiguous
        np.zeros((0, 5), dtype=np.float32),
    ],
)
def test_the_receiver_takes_the_bytes_the_sender_wrote(pair, array):
    pair.send("t", array)
    received = pair.take("t").copy()
    assert received.dtype == array.dtype and received.shape == array.shape
    assert received.tobytes() == np.ascontiguousarray(array).tobytes()


def test_headers_sent_before_a_read_all_arrive_and_a_key_that_would_break_one_is_refused(pair):
    """A header is a line of tab-separated fields: several written before the receiver reads
    come apart into their messages; a key holding a tab or a line break is refused before
    anything is written."""
    arrays = {f"s{step}/a0@1": np.full((2, step + 1), step, np.float32) for step in range(5)}
    for key, array in arrays.items():
        pair.send(key, array)
    pair.receiver.on_readable()
    assert sorted(pair.inbox) == sorted(arrays)
    for key, array in arrays.items():
        assert pair.inbox.pop(key).copy().tolist() == array.tolist()
    for key in ("a\tb", "a\nb"):
        with pytest.raises(ValueError, match="no tab or line break"):
            pair.send(key, np.ones(2))
    pair.receiver.on_readable()
    assert not pair.inbox


def test_segments_and_fifos_are_readable_by_their_owner_only(pair):
    """Another user on the machine can neither read a run's tensors nor write its FIFOs: they
    lie in a directory only their owner may enter, and are closed to others themselves."""
    pair.send("t", np.ones(8, np.float32))
    directory = run_directory(pair.run_id)
    assert os.stat(directory).st_mode & 0o777 == 0o700
    assert os.stat(directory).st_uid == os.geteuid()
    objects = _objects(pair.run_id)
    assert any(name.endswith("-ready") for name in objects) and pair.segments()
    for name in objects:
        mode = os.stat(os.path.join(directory, name)).st_mode & 0o777
        assert mode == 0o600, (name, oct(mode))
    pair.take("t").copy()


def test_a_message_is_added_or_copied_straight_into_the_receivers_buffer(pair):
    pair.send("a", np.full(4, 2.0))
    pair.send("b", np.arange(4.0))
    out = np.ones(6)
    pair.take("a").add_into(out[1:5], out[1:5])
    assert out.tolist() == [1, 3, 3, 3, 3, 1]
    pair.take("b").copy_into(out[2:6])
    assert out.tolist() == [1, 3, 0, 1, 2, 3]


def test_a_copied_message_is_private_and_its_segment_is_reused(pair):
    pair.send("first", np.ones(4))
    received = pair.take("first").copy()
    pair.send("second", np.full(4, 7.0))  # the segment came back and is written again
    assert received.tolist() == [1.0] * 4
    assert pair.take("second").copy().tolist() == [7.0] * 4
    assert len(pair.segments()) == 1


def test_packed_parts_arrive_as_their_concatenation_written_once(pair):
    parts = [np.arange(6, dtype=np.float32).reshape(2, 3), np.full(2, 9, np.float32)]
    pair.sender.send_packed("p", parts, timeout=1.0)
    assert pair.take("p").copy().tolist() == [0, 1, 2, 3, 4, 5, 9, 9]
    with pytest.raises(TypeError, match="one dtype"):
        pair.sender.send_packed("q", [np.ones(2, np.float32), np.ones(2)], timeout=1.0)


def test_a_lent_message_keeps_its_segment_until_it_is_settled(pair):
    pair.send("lent", np.full(4, 3.0))
    view, settle = pair.take("lent").lend()
    pair.send("next", np.full(4, 5.0))  # the lent segment is not free: a second one
    assert view.tolist() == [3.0] * 4 and not view.flags.writeable
    assert len(pair.segments()) == 2
    pair.take("next").copy()
    settle()
    settle()  # once only: a second call hands nothing back twice
    pair.send("again", np.zeros(4))
    pair.send("more", np.zeros(4))
    assert len(pair.segments()) == 2  # both came back and are written again


def test_the_sender_does_not_wait_for_a_receiver_that_has_not_taken_yet(pair):
    for index in range(3):
        pair.send(f"k{index}", np.full(3, float(index)))
    assert len(pair.segments()) == 3  # one per message in flight
    # Taken in another order than sent, as a partitioned graph may.
    assert [pair.take(f"k{i}").copy()[0] for i in (2, 0, 1)] == [2.0, 0.0, 1.0]
    for index in range(3):
        pair.send(f"again{index}", np.zeros(3))
    assert len(pair.segments()) == 3  # all three were handed back and reused


def test_a_tensor_too_big_for_every_free_segment_replaces_one_by_a_bigger(pair):
    pair.send("small", np.ones(10))
    pair.take("small").copy()
    (small,) = pair.segments()
    pair.send("big", np.arange(100.0))
    assert pair.take("big").copy().tolist() == list(range(100))
    (big,) = pair.segments()
    assert big != small and small not in pair.receiver._attached


def test_a_message_can_be_taken_only_once(pair):
    pair.send("once", np.ones(2))
    message = pair.take("once")
    message.copy()
    with pytest.raises(RuntimeError, match="taken twice"):
        message.copy()


def test_a_receiver_that_stops_taking_stalls_the_sender_within_its_timeout(pair, monkeypatch):
    monkeypatch.setattr(shared_memory_channel, "MAX_SEGMENTS_IN_FLIGHT", 2)
    pair.send("x0", np.ones(2))
    pair.send("x1", np.ones(2))
    start = time.monotonic()
    with pytest.raises(ChannelStalled, match="held 2 segments"):
        pair.sender.send("x2", np.ones(2), timeout=0.3)
    assert time.monotonic() - start < 2.0


def test_room_is_checked_against_the_free_space_of_dev_shm():
    assert has_room(1)
    assert not has_room(2**62)


def _lose_hold(run_id: str) -> None:
    """What a process killed with ``kill -9`` does to its hold on a run's directory: the
    kernel drops its lock."""
    descriptor, _ = shared_memory._holds.pop(run_directory(run_id))
    os.close(descriptor)


def test_a_finished_runs_leftovers_are_swept_and_the_sender_still_ends_cleanly():
    # A worker killed mid-run cannot unlink its objects; whoever ends the run sweeps them.
    run_id = f"test-sweep-{os.getpid()}"
    sender = ChannelSender(run_id, 1, 0)
    sender.send("k", np.ones(3), timeout=1.0)
    assert unlink_run_segments(run_id) == [] and _objects(run_id)  # held: the run goes on
    _lose_hold(run_id)
    swept = unlink_run_segments(run_id)
    assert len(swept) == 4 and not _objects(run_id)  # two FIFOs, the probe, one segment
    sender.close()  # its segments were unlinked under it
    assert not _objects(run_id)


def test_the_registry_delivers_on_the_event_loop_and_discards_per_run():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    delivered: dict[str, SharedMessage] = {}
    arrived = threading.Event()

    def deliver(key: str, message: SharedMessage) -> None:
        delivered[key] = message
        arrived.set()

    registry = ChannelRegistry(loop)
    mine, other = f"test-reg-a-{os.getpid()}", f"test-reg-b-{os.getpid()}"
    try:
        registry.listen(mine, 0, 1, deliver)
        registry.listen(mine, 0, 1, deliver)  # idempotent
        registry.sender(mine, 0, 1).send("k", np.arange(5.0), timeout=1.0)
        assert arrived.wait(5.0)
        assert delivered.pop("k").copy().tolist() == list(range(5))
        registry.sender(other, 0, 1)
        registry.discard(mine)
        assert _objects(other) and all(mine not in name for name in _objects(other))
        assert sorted(unlink_run_segments(mine)) == [
            "0-1-done",
            "0-1-ready",
        ]  # the FIFOs are left for the run's sweep; every segment was unlinked by its sender
    finally:
        registry.discard()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5.0)
        loop.close()
        unlink_run_segments(other)
    assert not _objects(mine) and not _objects(other)
