"""Pipeline steps: the stage workers' order of messages, GPipe's bubble, 1F1B's memory."""

from __future__ import annotations

import pytest

from workbench.parallel.pipeline.schedules import (
    gpipe,
    gpipe_bubble,
    one_forward_one_backward,
    play_schedule,
)
from workbench.simulate import (
    Link,
    peak_in_flight,
    pipeline_bubble,
    pipeline_programs,
    simulate,
    uniform,
)

FREE = uniform(Link(0.0, float("inf")))
SHAPES = [(2, 1), (2, 4), (3, 7), (4, 4), (4, 8), (8, 16)]


def stages(count):
    return [f"stage{s}" for s in range(count)]


def even_pipeline(schedule, forward=1.0, backward=2.0):
    count = len(schedule)
    return pipeline_programs(
        stages(count), schedule, [forward] * count, [backward] * count, [1024] * (count - 1)
    )


@pytest.mark.parametrize(("p", "m"), SHAPES)
@pytest.mark.parametrize("make", [gpipe, one_forward_one_backward], ids=["gpipe", "1f1b"])
def test_equal_stages_over_free_links_have_gpipes_bubble(make, p, m):
    timeline = simulate(even_pipeline(make(p, m)), FREE)
    assert pipeline_bubble(timeline, stages(p)) == pytest.approx((p - 1) / (m + p - 1))
    assert pipeline_bubble(timeline, stages(p)) == pytest.approx(gpipe_bubble(p, m))
    # The same makespan as the schedule's own player, which knows nothing of messages.
    assert timeline.makespan == pytest.approx(play_schedule(make(p, m), 1.0, 2.0).makespan)


@pytest.mark.parametrize(("p", "m"), SHAPES)
def test_1f1b_holds_fewer_microbatches_than_gpipe(p, m):
    held_by_gpipe = simulate(even_pipeline(gpipe(p, m)), FREE)
    held_by_1f1b = simulate(even_pipeline(one_forward_one_backward(p, m)), FREE)
    for stage, device in enumerate(stages(p)):
        assert peak_in_flight(held_by_gpipe, device) == m
        assert peak_in_flight(held_by_1f1b, device) == min(p - stage, m)


def test_a_middle_stage_receives_computes_and_sends_as_the_stage_worker_does():
    programs = even_pipeline(gpipe(3, 1))
    steps = [
        (type(a).__name__, getattr(a, "key", getattr(a, "label", None))) for a in programs["stage1"]
    ]
    assert steps == [
        ("Recv", "s0/a0"),
        ("Compute", "F0"),
        ("Send", "s0/a0"),
        ("Recv", "s0/g0"),
        ("Compute", "B0"),
        ("Send", "s0/g0"),
    ]
    assert {a.source for a in programs["stage1"] if type(a).__name__ == "Recv"} == {
        "stage0",
        "stage2",
    }


def test_two_stages_one_microbatch_with_transfers_by_hand():
    """Activation 1 MB forward, gradient 2 MB back, 1 MB/s links of 0.5 s latency."""
    programs = pipeline_programs(
        ["a", "b"],
        gpipe(2, 1),
        [1.0, 1.0],
        [2.0, 2.0],
        [10**6],
        gradient_bytes=[2 * 10**6],
        update_seconds=[0.5, 0.5],
    )
    timeline = simulate(programs, uniform(Link(0.5, 1e6)))
    rows = {(i.device, i.label, i.kind): (i.start, i.end) for i in timeline.intervals}
    assert rows == {
        ("a", "F0", "compute"): (0.0, 1.0),
        ("a", "s0/a0", "send"): (1.0, 2.0),
        ("b", "s0/a0", "recv"): (0.0, 2.5),
        ("b", "F0", "compute"): (2.5, 3.5),
        ("b", "B0", "compute"): (3.5, 5.5),
        ("b", "s0/g0", "send"): (5.5, 7.5),
        ("b", "update", "compute"): (7.5, 8.0),
        ("a", "s0/g0", "recv"): (2.0, 8.0),
        ("a", "B0", "compute"): (8.0, 10.0),
        ("a", "update", "compute"): (10.0, 10.5),
    }
    assert timeline.busy("a") == 3.5  # forward, backward and update
    assert pipeline_bubble(timeline, ["a", "b"]) == pytest.approx(1 - 6 / (2 * 10))


def test_a_backward_sends_its_input_gradient_before_its_weight_gradients():
    """Stage b's backward (2 s) has its input gradient after 0.5 s: it goes back then, and
    stage a's backward starts while b computes its weight gradients."""
    programs = pipeline_programs(
        ["a", "b"], gpipe(2, 1), [1.0, 1.0], [2.0, 2.0], [0], input_grad_ready_seconds=[2.0, 0.5]
    )
    assert [(type(a).__name__, getattr(a, "seconds", None)) for a in programs["b"]][1:] == [
        ("Compute", 1.0),
        ("Compute", 0.5),
        ("Send", None),
        ("Compute", 1.5),
    ]
    timeline = simulate(programs, FREE)
    assert [(i.start, i.end) for i in timeline.of("b", "compute")] == [
        (1.0, 2.0),
        (2.0, 2.5),
        (2.5, 4.0),
    ]
    assert [(i.start, i.end) for i in timeline.of("a", "compute")][-1] == (2.5, 4.5)
    assert timeline.makespan == 4.5  # 5.0 with the gradient sent after the whole backward
    # The backward cut in two is still one micro-batch freed.
    assert peak_in_flight(timeline, "b") == 1


def test_sends_on_their_own_stream_overlap_the_next_forward():
    def first_stage_starts(send_stream):
        programs = pipeline_programs(
            ["a", "b"], gpipe(2, 2), [1.0] * 2, [1.0] * 2, [10**6], send_stream=send_stream
        )
        timeline = simulate(programs, uniform(Link(0.0, 1e6)))
        return [i.start for i in timeline.of("a", "compute")]

    assert first_stage_starts("main")[:2] == [0.0, 2.0]  # the copy holds the stage
    assert first_stage_starts("sends")[:2] == [0.0, 1.0]  # send_async: compute goes on


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((["a", "b"], gpipe(2, 1), [1.0], [1.0, 1.0], [8]), "forward and backward seconds"),
        ((["a", "b"], gpipe(2, 1), [1.0] * 2, [1.0] * 2, []), "activation bytes"),
    ],
)
def test_inconsistent_inputs_are_refused(arguments, message):
    with pytest.raises(ValueError, match=message):
        pipeline_programs(*arguments)
