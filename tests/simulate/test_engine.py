"""The event engine on literal programs: the timelines come out as worked by hand."""

from __future__ import annotations

import pytest

from workbench.simulate import (
    Compute,
    DeadlockError,
    Link,
    Recv,
    RingAllReduce,
    Send,
    Signal,
    Wait,
    simulate,
    uniform,
)

ONE_MB_PER_SECOND = uniform(Link(latency=0.5, bandwidth=1e6))


def spans(timeline, device=None):
    """(device, stream, kind, label, start, end) of every interval, in start order."""
    chosen = [i for i in timeline.intervals if device is None or i.device == device]
    return sorted(
        ((i.device, i.stream, i.kind, i.label, i.start, i.end) for i in chosen),
        key=lambda row: (row[4], row[0], row[1]),
    )


def test_a_message_arrives_put_time_plus_latency_after_it_is_posted():
    timeline = simulate(
        {"a": [Compute(1.0, "work"), Send("b", 10**6, "x")], "b": [Recv("a", "x")]},
        ONE_MB_PER_SECOND,
    )
    assert spans(timeline) == [
        ("a", "main", "compute", "work", 0.0, 1.0),
        ("b", "main", "recv", "x", 0.0, 2.5),
        ("a", "main", "send", "x", 1.0, 2.0),
    ]
    assert timeline.finish == {"a": 2.0, "b": 2.5}
    assert timeline.makespan == 2.5
    assert (timeline.bytes_sent("a"), timeline.bytes_received("b")) == (10**6, 10**6)
    assert (timeline.busy("a"), timeline.busy("b")) == (1.0, 0.0)


def test_a_receive_posted_after_the_arrival_ends_at_once():
    timeline = simulate(
        {"a": [Send("b", 10**6, "x")], "b": [Compute(5.0, "late"), Recv("a", "x")]},
        ONE_MB_PER_SECOND,
    )
    assert spans(timeline, "b")[-1] == ("b", "main", "recv", "x", 5.0, 5.0)
    assert timeline.bytes_received("b") == 10**6


def test_transfers_on_one_directed_link_queue_first_posted_first_served():
    # Two streams of a post a message each at t=0 to b (one link) and one to c (another).
    programs = {
        "a": [
            Send("b", 10**6, "first", stream="s1"),
            Send("b", 10**6, "second", stream="s2"),
            Send("c", 10**6, "elsewhere", stream="s3"),
        ],
        "b": [Recv("a", "second"), Recv("a", "first")],
        "c": [Recv("a", "elsewhere")],
    }
    timeline = simulate(programs, ONE_MB_PER_SECOND)
    sends = {i.label: (i.start, i.end) for i in timeline.of("a")}
    # The second waits for the link until the first has put its bytes; c's link is free.
    assert sends == {"first": (0.0, 1.0), "second": (0.0, 2.0), "elsewhere": (0.0, 1.0)}
    # b asked for "second" first: it arrives at 2.5; "first" arrived at 1.5, taken at once.
    assert spans(timeline, "b") == [
        ("b", "main", "recv", "second", 0.0, 2.5),
        ("b", "main", "recv", "first", 2.5, 2.5),
    ]
    assert timeline.finish["c"] == 1.5


def test_ties_go_by_device_order_then_action_order():
    # Both sends are posted at t=0 on one link; the one earlier in the program goes first,
    # whatever its stream is called.
    programs = {
        "a": [Send("b", 10**6, "x", stream="z"), Send("b", 10**6, "y", stream="a")],
        "b": [Recv("a", "x"), Recv("a", "y")],
    }
    ends = {i.label: i.end for i in simulate(programs, ONE_MB_PER_SECOND).of("a")}
    assert ends == {"x": 1.0, "y": 2.0}
    assert simulate(programs, ONE_MB_PER_SECOND) == simulate(programs, ONE_MB_PER_SECOND)


def test_streams_of_one_device_run_concurrently_and_in_order_within_each():
    programs = {
        "a": [
            Compute(3.0, "backward", stream="compute"),
            Send("b", 2 * 10**6, "bucket", stream="communication"),
            Compute(1.0, "update", phase="update", stream="compute"),
        ],
        "b": [Recv("a", "bucket")],
    }
    timeline = simulate(programs, ONE_MB_PER_SECOND)
    assert spans(timeline, "a") == [
        ("a", "communication", "send", "bucket", 0.0, 2.0),
        ("a", "compute", "compute", "backward", 0.0, 3.0),
        ("a", "compute", "compute", "update", 3.0, 4.0),
    ]
    assert timeline.busy("a") == 4.0  # compute and update phases count as busy


def test_a_wait_holds_its_stream_until_the_signal():
    # DDP's overlap: the communication stream sends each bucket once backward signals it.
    programs = {
        "a": [
            Compute(1.0, "backward 1", stream="compute"),
            Signal("bucket 1", stream="compute"),
            Compute(2.0, "backward 0", stream="compute"),
            Signal("bucket 0", stream="compute"),
            Wait("bucket 1", stream="communication"),
            Send("b", 10**6, "bucket 1", stream="communication"),
            Wait("bucket 0", stream="communication"),
            Send("b", 10**6, "bucket 0", stream="communication"),
        ],
        "b": [Recv("a", "bucket 1"), Recv("a", "bucket 0")],
    }
    timeline = simulate(programs, ONE_MB_PER_SECOND)
    sends = [(i.label, i.start, i.end) for i in timeline.of("a", "send")]
    assert sends == [("bucket 1", 1.0, 2.0), ("bucket 0", 3.0, 4.0)]
    assert timeline.finish == {"a": 4.0, "b": 4.5}


def test_a_wait_after_its_signal_goes_on_at_once():
    programs = {
        "a": [
            Signal("ready", stream="one"),
            Compute(2.0, "later", stream="two"),
            Wait("ready", stream="two"),
            Compute(1.0, "after", stream="two"),
        ]
    }
    assert simulate(programs, ONE_MB_PER_SECOND).of("a")[-1].start == 2.0


@pytest.mark.parametrize(
    ("programs", "stuck"),
    [
        ({"a": [Recv("b", "never")], "b": []}, {("a", "main"): "Recv 'never' from b"}),
        ({"a": [Wait("nobody", stream="s")]}, {("a", "s"): "Wait 'nobody'"}),
        (
            {
                "a": [Recv("b", "x"), Send("b", 1, "y")],
                "b": [Recv("a", "y"), Send("a", 1, "x")],
            },
            {("a", "main"): "Recv 'x' from b", ("b", "main"): "Recv 'y' from a"},
        ),
        (
            {
                "a": [RingAllReduce(("a", "b"), (1, 1), 4, 1, 0.0, "g")],
                "b": [Wait("first")],
            },
            {("a", "main"): "RingAllReduce 'g' over 2 devices", ("b", "main"): "Wait 'first'"},
        ),
    ],
    ids=["receive-without-send", "wait-without-signal", "cycle", "ring-member-missing"],
)
def test_a_program_that_cannot_finish_raises_naming_who_waits_on_what(programs, stuck):
    with pytest.raises(DeadlockError) as raised:
        simulate(programs, ONE_MB_PER_SECOND)
    assert raised.value.stuck == stuck
    for (device, _), what in stuck.items():
        assert device in str(raised.value) and what in str(raised.value)


@pytest.mark.parametrize(
    ("programs", "message"),
    [
        ({"a": [Send("z", 1, "x")]}, "a sends 'x' to z, which has no program"),
        ({"a": [Send("a", 1, "x")]}, "a sends 'x' to itself"),
        ({"a": [Recv("z", "x")]}, "a receives 'x' from z, which has no program"),
        ({"a": [Send("b", 1, "x")], "b": []}, "b never receives it"),
        (
            {"a": [Send("b", 1, "x"), Send("b", 1, "x")], "b": [Recv("a", "x")]},
            "a sends 'x' to b more than once",
        ),
        ({"a": [Signal("s"), Signal("s")]}, "a signals 's' more than once"),
        ({"a": [RingAllReduce(("b", "c"), (1, 1), 4, 1, 0.0, "g")]}, "not a member"),
    ],
)
def test_malformed_programs_are_refused_before_running(programs, message):
    with pytest.raises(ValueError, match=message):
        simulate(programs, ONE_MB_PER_SECOND)


def test_a_non_action_is_refused():
    with pytest.raises(TypeError, match="not a simulator action"):
        simulate({"a": ["compute"]}, ONE_MB_PER_SECOND)


def test_ring_members_must_describe_the_same_ring():
    programs = {
        "a": [RingAllReduce(("a", "b"), (1, 1), 4, 1, 0.0, "g")],
        "b": [RingAllReduce(("a", "b"), (2, 1), 4, 1, 0.0, "g")],
    }
    with pytest.raises(ValueError, match="describe different rings"):
        simulate(programs, ONE_MB_PER_SECOND)


def test_every_action_is_one_event():
    programs = {"a": [Compute(1.0, str(i)) for i in range(100)], "b": [Compute(1.0, "x")]}
    timeline = simulate(programs, ONE_MB_PER_SECOND)
    assert timeline.events == 101
    assert timeline.makespan == 100.0


def test_a_timeline_refuses_devices_it_never_simulated():
    timeline = simulate({"a": []}, ONE_MB_PER_SECOND)
    assert timeline.makespan == 0.0
    with pytest.raises(KeyError, match="'b' is not one of the simulated devices"):
        timeline.busy("b")


def test_rings_that_share_a_key_but_not_their_members_are_refused():
    programs = {
        "a": [RingAllReduce(("a", "b"), (1, 1), 4, 1, 0.0, "g")],
        "b": [],
        "c": [RingAllReduce(("c", "a"), (1, 1), 4, 1, 0.0, "g")],
    }
    with pytest.raises(ValueError, match="describe different rings"):
        simulate(programs, ONE_MB_PER_SECOND)
