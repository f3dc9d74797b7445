"""Shared-memory Send/Recv between workers on one host: what the sender writes is what the
receiver reads, segments grow and are reused, and nothing outlives its run."""

from __future__ import annotations

import os

import numpy as np
import pytest

from workbench.runtime.shared_memory import (
    SHM_DIRECTORY,
    IncomingSegments,
    OutgoingSegments,
    has_room,
    unlink_run_segments,
)


def _segments(run_id: str) -> list[str]:
    return [name for name in os.listdir(SHM_DIRECTORY) if run_id in name]


@pytest.fixture
def channel():
    outgoing, incoming = OutgoingSegments(), IncomingSegments()
    yield outgoing, incoming
    incoming.discard()
    outgoing.discard()


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
def test_the_receiver_reads_the_bytes_the_sender_wrote(channel, array):
    outgoing, incoming = channel
    name = outgoing.write("run-a", 0, 1, array)
    received = incoming.read(name, array.dtype.str, array.shape)
    assert received.dtype == array.dtype and received.shape == array.shape
    assert received.tobytes() == np.ascontiguousarray(array).tobytes()


def test_the_received_tensor_is_a_private_copy(channel):
    outgoing, incoming = channel
    name = outgoing.write("run-a", 0, 1, np.ones(4))
    received = incoming.read(name, "<f8", (4,))
    outgoing.write("run-a", 0, 1, np.full(4, 7.0))  # the sender reuses its segment
    assert received.tolist() == [1.0] * 4


def test_a_segment_is_reused_and_grows_when_a_tensor_does_not_fit(channel):
    outgoing, incoming = channel
    first = outgoing.write("run-b", 0, 1, np.ones(10))
    assert outgoing.write("run-b", 0, 1, np.ones(5)) == first
    bigger = outgoing.write("run-b", 0, 1, np.arange(100.0))
    assert bigger != first and not os.path.exists(os.path.join(SHM_DIRECTORY, first))
    assert incoming.read(bigger, "<f8", (100,)).tolist() == list(range(100))
    assert len(_segments("run-b")) == 1


def test_each_peer_has_its_own_segment(channel):
    outgoing, incoming = channel
    to_one = outgoing.write("run-c", 0, 1, np.ones(3))
    to_two = outgoing.write("run-c", 0, 2, np.zeros(3))
    assert to_one != to_two
    assert incoming.read(to_one, "<f8", (3,)).tolist() == [1.0] * 3


def test_discarding_a_run_unlinks_its_segments_and_no_others(channel):
    outgoing, incoming = channel
    mine = outgoing.write("run-d", 0, 1, np.ones(3))
    other = outgoing.write("run-e", 0, 1, np.ones(3))
    incoming.read(mine, "<f8", (3,))
    outgoing.discard("run-d")
    incoming.discard("run-d")
    assert not _segments("run-d") and _segments("run-e")
    assert incoming.read(mine, "<f8", (3,)) is None  # gone: the sender must fall back
    assert incoming.read(other, "<f8", (3,)).tolist() == [1.0] * 3


def test_a_segment_the_receiver_cannot_attach_reads_as_none():
    assert IncomingSegments().read("dtrain-no-such-segment", "<f4", (2,)) is None


def test_room_is_checked_against_the_free_space_of_dev_shm():
    assert has_room(1)
    assert not has_room(2**62)


def test_a_finished_runs_leftover_segments_are_swept_from_the_host():
    # A worker killed mid-run cannot unlink its segment; whoever ends the run sweeps it.
    dead_workers = OutgoingSegments()
    name = dead_workers.write("run-f", 1, 0, np.ones(3))
    dead_workers._segments.clear()  # as if the process had died holding it
    assert unlink_run_segments("run-f") == [name]
    assert not _segments("run-f")


def test_a_sender_whose_segment_a_peer_swept_still_ends_cleanly():
    outgoing = OutgoingSegments()
    outgoing.write("run-g", 0, 1, np.ones(3))
    unlink_run_segments("run-g")  # the peer finished first and swept the run
    outgoing.discard("run-g")
    assert not _segments("run-g")
