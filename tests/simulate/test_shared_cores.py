"""Devices sharing a host's cores: CPU work stretches as processor sharing says, worked by hand;
without ``cores`` (or with cores to spare) the timelines are the plain engine's."""

from __future__ import annotations

import random

import pytest

from tests.simulate.test_lockstep_ring import CASES, ranks, ring_programs
from tests.simulate.test_pipeline_programs import even_pipeline
from workbench.parallel.pipeline.schedules import one_forward_one_backward
from workbench.simulate import (
    Compute,
    DeadlockError,
    Link,
    Recv,
    RingAllReduce,
    RingOptions,
    Send,
    Signal,
    Wait,
    push_pull,
    ring_allreduce_programs,
    simulate,
    uniform,
)
from workbench.simulate.cores import SharedCores

ONE_MB_PER_SECOND = uniform(Link(latency=0.5, bandwidth=1e6))
FREE = uniform(Link(0.0, float("inf")))


def one_host(device: str) -> str:
    return "host"


def spans(timeline):
    """(device, stream, kind, label, start, end) of every interval, in start order."""
    return sorted(
        ((i.device, i.stream, i.kind, i.label, i.start, i.end) for i in timeline.intervals),
        key=lambda row: (row[4], row[0], row[1]),
    )


def compute_everywhere(devices: str, seconds: float = 1.0) -> dict:
    return {device: [Compute(seconds, "work")] for device in devices}


def test_two_devices_on_one_core_each_take_half_and_end_at_2s():
    timeline = simulate(compute_everywhere("ab"), FREE, {"host": 1}, host_of=one_host)
    assert spans(timeline) == [
        ("a", "main", "compute", "work", 0.0, 2.0),
        ("b", "main", "compute", "work", 0.0, 2.0),
    ]
    assert timeline.busy("a") == 2.0  # a stretched compute counts its whole interval


def test_two_devices_on_two_cores_run_at_full_speed():
    timeline = simulate(compute_everywhere("ab"), FREE, {"host": 2}, host_of=one_host)
    assert timeline.finish == {"a": 1.0, "b": 1.0}


def test_three_devices_on_two_cores_each_get_two_thirds_of_a_core():
    timeline = simulate(compute_everywhere("abc"), FREE, {"host": 2}, host_of=one_host)
    assert timeline.finish == {"a": 1.5, "b": 1.5, "c": 1.5}


def test_work_starting_while_other_work_is_half_done_shares_from_then_on():
    # b waits for a message (no CPU work) until 0.5 s, when a is half done; from then on each
    # gets half the core: a's last 0.5 s take 1 s (ends 1.5), b's 1 s ends alone at 2.0.
    programs = {
        "a": [Compute(1.0, "work")],
        "b": [Recv("c", "go"), Compute(1.0, "work")],
        "c": [Send("b", 0, "go")],
    }
    timeline = simulate(
        programs,
        uniform(Link(0.5, float("inf"))),
        {"host": 1},
        host_of=lambda device: "host" if device in "ab" else device,
    )
    assert spans(timeline) == [
        ("a", "main", "compute", "work", 0.0, 1.5),
        ("b", "main", "recv", "go", 0.0, 0.5),
        ("c", "main", "send", "go", 0.0, 0.0),
        ("b", "main", "compute", "work", 0.5, 2.0),
    ]


def test_a_sends_put_time_is_cpu_work_and_stretches_while_shared():
    # a puts two 1 MB messages (1 s each at full speed) on one link while b computes 1 s, one
    # core between them: the first put and b's compute share it until 2 s, then the second
    # message, queued behind the first on the link, is put alone from 2 s to 3 s.
    programs = {
        "a": [
            Send("c", 10**6, "first", stream="s1"),
            Send("c", 10**6, "second", stream="s2"),
        ],
        "b": [Compute(1.0, "work")],
        "c": [Recv("a", "first"), Recv("a", "second")],
    }
    timeline = simulate(
        programs,
        ONE_MB_PER_SECOND,
        {"host": 1},
        host_of=lambda device: "host" if device in "ab" else device,
    )
    assert spans(timeline) == [
        ("a", "s1", "send", "first", 0.0, 2.0),
        ("a", "s2", "send", "second", 0.0, 3.0),
        ("b", "main", "compute", "work", 0.0, 2.0),
        ("c", "main", "recv", "first", 0.0, 2.5),  # the put's end plus the latency
        ("c", "main", "recv", "second", 2.5, 3.5),
    ]


def test_streams_of_one_device_share_its_host_too():
    programs = {"a": [Compute(1.0, "one", stream="s1"), Compute(1.0, "two", stream="s2")]}
    assert simulate(programs, FREE, {"a": 1}).finish == {"a": 2.0}


def test_a_background_load_keeps_cores_from_the_programs():
    # 2 cores, 1 taken by the client and scheduler: two 1 s computes share the other one.
    timeline = simulate(
        compute_everywhere("ab"), FREE, {"host": 2}, host_of=one_host, background={"host": 1}
    )
    assert timeline.finish == {"a": 2.0, "b": 2.0}
    # Half a core taken: one 1 s compute alone on a 1-core host runs at half speed.
    alone = simulate({"a": [Compute(1.0, "work")]}, FREE, {"a": 1}, background={"a": 0.5})
    assert alone.finish == {"a": 2.0}


def test_hosts_not_in_cores_have_all_the_cores_they_need():
    timeline = simulate(compute_everywhere("ab"), FREE, {"a": 1})
    assert timeline.finish == {"a": 1.0, "b": 1.0}


def test_jobs_end_no_sooner_than_their_work_and_a_busy_core_does_all_of_it():
    # Random jobs on one core, all posted before the first ends: the core never idles, so
    # the last ends when the total work is done, whatever the order and the rates between.
    chooser = random.Random(7)
    shared = SharedCores({"h": 1})
    works = [chooser.uniform(0.1, 2.0) for _ in range(40)]
    starts = sorted(chooser.uniform(0.0, 0.09) for _ in works)
    for job, (start, work) in enumerate(zip(starts, works)):
        shared.start("h", work, start, job)
    ends = {}
    while shared.running:
        time, jobs = shared.finish_next()
        ends.update(dict.fromkeys(jobs, time))
    assert all(ends[job] >= starts[job] + works[job] for job in ends)
    assert max(ends.values()) == pytest.approx(starts[0] + sum(works), rel=1e-12)


def engine_programs():
    """Programs of tests/simulate/test_engine.py and others, each device on its own host."""
    return [
        {
            "a": [
                Compute(3.0, "backward", stream="compute"),
                Send("b", 2 * 10**6, "bucket", stream="communication"),
                Compute(1.0, "update", phase="update", stream="compute"),
            ],
            "b": [Recv("a", "bucket")],
        },
        {
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
        },
        {
            "a": [
                Send("b", 10**6, "first", stream="s1"),
                Send("b", 10**6, "second", stream="s2"),
                Send("c", 10**6, "elsewhere", stream="s3"),
            ],
            "b": [Recv("a", "second"), Recv("a", "first")],
            "c": [Recv("a", "elsewhere")],
        },
        push_pull(["w0", "w1", "w2"], ["s0", "s1"], [10**6, 3 * 10**6], 1e-7, "g", [0.2, 0.1]),
        even_pipeline(one_forward_one_backward(3, 4)),
        ring_allreduce_programs(ranks(5), 4 * 10**5, 1e-7, "g", RingOptions(slice_bytes=10**5)),
    ]


@pytest.mark.parametrize("programs", engine_programs())
def test_without_cores_or_with_cores_to_spare_the_timeline_is_the_plain_engines(programs):
    plain = simulate(programs, ONE_MB_PER_SECOND)
    assert simulate(programs, ONE_MB_PER_SECOND, None) == plain
    # Every device on its own host with a core per stream: never short, so every interval
    # is the plain engine's to the bit. Only the order they are recorded in (a shared job's
    # when it ends) and the event count (each end of CPU work is one) differ.
    spare = {device: 3 for device in programs}
    shared = simulate(programs, ONE_MB_PER_SECOND, spare)
    assert shared.finish == plain.finish
    assert sorted(shared.intervals, key=repr) == sorted(plain.intervals, key=repr)
    assert shared.events > plain.events  # it did run the shared engine
    assert shared.events > plain.events


@pytest.mark.parametrize(
    ("size", "elements", "slice_bytes", "link", "staggered", "busy_link"), CASES
)
def test_a_vectorised_ring_on_limited_hosts_runs_as_the_explicit_ring(
    size, elements, slice_bytes, link, staggered, busy_link
):
    vectorised, explicit = (
        ring_programs(size, elements, slice_bytes, v, staggered, busy_link) for v in (True, False)
    )
    spare = {device: 2 for device in ranks(size)}
    # With cores to spare: the times of the plain engine's vectorised ring.
    assert simulate(vectorised, link, spare).finish == simulate(vectorised, link).finish
    # Short of cores (two ranks per core): exactly what the explicit ring gives.
    pairs = {f"h{rank // 2}": 1 for rank in range(size)}
    by_pair = {"host_of": lambda device: f"h{int(device[1:]) // 2}"}
    shared = simulate(vectorised, link, pairs, **by_pair)
    assert shared == simulate(explicit, link, pairs, **by_pair)
    assert shared.makespan >= simulate(vectorised, link).makespan


def test_a_ring_with_no_member_on_a_limited_host_stays_vectorised():
    ring = ring_allreduce_programs(["a", "b"], 16, 0.0, "g", RingOptions(vectorised=True))
    timeline = simulate({**ring, "c": [Compute(1.0, "work")]}, FREE, {"c": 1})
    assert [i.kind for i in timeline.of("a")] == ["collective"]


@pytest.mark.parametrize(
    ("programs", "stuck"),
    [
        ({"a": [Recv("b", "never")], "b": []}, {("a", "main"): "Recv 'never' from b"}),
        (
            {"a": [Compute(1.0, "work"), Wait("nobody")], "b": [Compute(1.0, "work")]},
            {("a", "main"): "Wait 'nobody'"},
        ),
        (
            {
                "a": [Compute(1.0, "work"), Recv("b", "x"), Send("b", 1, "y")],
                "b": [Recv("a", "y"), Send("a", 1, "x")],
            },
            {("a", "main"): "Recv 'x' from b", ("b", "main"): "Recv 'y' from a"},
        ),
        (
            {
                "a": [RingAllReduce(("a", "b"), (1, 1), 4, 1, 0.0, "g")],
                "b": [Compute(1.0, "work"), Wait("first")],
            },
            {("a", "main"): "RingAllReduce 'g' over 2 devices", ("b", "main"): "Wait 'first'"},
        ),
    ],
    ids=["receive-without-send", "wait-after-shared-work", "cycle", "ring-member-missing"],
)
def test_a_program_that_cannot_finish_still_raises_with_shared_cores(programs, stuck):
    with pytest.raises(DeadlockError) as raised:
        simulate(programs, ONE_MB_PER_SECOND, {"host": 1}, host_of=one_host)
    assert raised.value.stuck == stuck


def test_ring_members_describing_different_rings_are_still_refused():
    programs = {
        "a": [RingAllReduce(("a", "b"), (1, 1), 4, 1, 0.0, "g")],
        "b": [RingAllReduce(("a", "b"), (2, 1), 4, 1, 0.0, "g")],
    }
    with pytest.raises(ValueError, match="describe different rings"):
        simulate(programs, FREE, {"host": 1}, host_of=one_host)


@pytest.mark.parametrize(
    ("cores", "background", "message"),
    [
        ({"elsewhere": 2}, None, "cores names hosts no device is on: elsewhere"),
        ({"host": 0}, None, "cores must be > 0"),
        ({"host": 2}, {"host": 2}, "leaves none of its 2"),
        ({"host": 2}, {"host": -1}, "leaves none"),
        (None, {"host": 1}, "a background load needs the host's cores"),
    ],
)
def test_cores_that_make_no_sense_are_refused(cores, background, message):
    with pytest.raises(ValueError, match=message):
        simulate(compute_everywhere("ab"), FREE, cores, host_of=one_host, background=background)


def test_the_same_inputs_give_the_same_timeline():
    programs = engine_programs()[3]
    run = {"cores": {"host": 2}, "host_of": one_host, "background": {"host": 0.3}}
    assert simulate(programs, ONE_MB_PER_SECOND, **run) == simulate(
        programs, ONE_MB_PER_SECOND, **run
    )
