"""Pipeline steps with virtual stages and split backwards: the simulator's programs play each
schedule as the schedule's own player does, and the planner costs I and W from the stage
graphs' halves."""

from __future__ import annotations

import pytest

from workbench.models import mlp
from workbench.optim import make_optimizer
from workbench.parallel.pipeline import ActionCosts, bubble_formula, make_schedule, play
from workbench.planner.device_costs import fixed_costs
from workbench.planner.step_programs import chunk_seconds, pipeline_stages, pipeline_step
from workbench.simulate import (
    Compute,
    Link,
    Recv,
    peak_in_flight,
    pipeline_bubble,
    pipeline_programs,
    simulate,
    uniform,
)

FREE = uniform(Link(0.0, float("inf")))


def _devices(count: int) -> list[str]:
    return [f"stage{s}" for s in range(count)]


@pytest.mark.parametrize(
    ("name", "p", "m", "v"),
    [
        ("interleaved-1f1b", 2, 4, 2),
        ("interleaved-1f1b", 3, 6, 3),
        ("interleaved-1f1b", 4, 8, 2),
        ("zero-bubble", 2, 4, 1),
        ("zero-bubble", 4, 8, 1),
        ("zero-bubble", 3, 2, 1),
    ],
)
def test_programs_over_free_links_play_as_the_schedule_does(name, p, m, v):
    costs = ActionCosts(1 / v, 2 / v, 1 / v, 1 / v)
    chunks = p * v
    programs = pipeline_programs(
        _devices(p),
        make_schedule(name, p, m, v),
        [costs.forward] * chunks,
        [costs.backward] * chunks,
        [1024] * (chunks - 1),
        input_grad_seconds=[costs.input_grad] * chunks,
        weight_grad_seconds=[costs.weight_grad] * chunks,
    )
    timeline = simulate(programs, FREE)
    played = play(make_schedule(name, p, m, v), costs)
    assert timeline.makespan == pytest.approx(played.makespan)
    assert pipeline_bubble(timeline, _devices(p)) == pytest.approx(played.bubble_fraction)
    if m >= p:
        formula = bubble_formula(name, p, m, v, costs)
        assert pipeline_bubble(timeline, _devices(p)) == pytest.approx(formula)
    peaks = tuple(peak_in_flight(timeline, d) for d in _devices(p))
    assert peaks == played.peak_in_flight


def test_a_chunk_hands_over_to_the_next_device_and_back_round_the_ring():
    programs = pipeline_programs(
        ["a", "b"], make_schedule("interleaved-1f1b", 2, 2, 2), [1.0] * 4, [2.0] * 4, [8] * 3
    )
    received = [action.key for action in programs["a"] if isinstance(action, Recv)]
    # Device a's second chunk (model chunk 2) takes b's first chunk's output, boundary 1; its
    # first chunk takes the gradient b's first chunk sends back over boundary 0.
    assert received[:2] == ["s0/a0@1", "s0/a1@1"]
    assert "s0/g0@0" in received and "s0/g0@2" in received


def test_the_planner_costs_i_and_w_as_the_halves_of_the_stage_backward():
    model, costs = mlp((8,), 3, (32, 16, 16)), fixed_costs()
    graphs, _ = pipeline_stages(model, 2, 8, "float64", "none")
    whole = chunk_seconds(graphs, ["a", "b"], costs, split=False)
    halves = chunk_seconds(graphs, ["a", "b"], costs, split=True)
    for k in range(2):
        assert halves.input_grad[k] + halves.weight_grad[k] == pytest.approx(whole.backward[k])
        assert halves.weight_grad[k] > 0
    assert halves.input_grad[0] == 0.0  # the model's first chunk hands no gradient on
    assert halves.input_grad[1] > 0


def test_the_planner_predicts_interleaved_and_zero_bubble_steps():
    model, optimizer = mlp((8,), 3, (32, 16, 16, 16)), make_optimizer("sgd")
    devices = ["a", "b"]

    def labels(name: str) -> list[str]:
        step = pipeline_step(
            model, optimizer, 16, "float64", devices, fixed_costs(), 2, name, virtual_stages=2
        )
        return [a.label for a in step.programs["a"] if isinstance(a, Compute)]

    assert labels("zero-bubble")[:4] == ["F0", "F1", "I0", "W0"]
    assert labels("interleaved-1f1b")[:4] == ["F0", "F1", "F0@1", "F1@1"]
    # The option is read with interleaving only; the other schedules keep one chunk.
    assert labels("1f1b") == ["F0", "F1", "B0", "B1", "update"]


def test_zero_bubble_memory_holds_no_more_than_1f1bs_first_stage():
    from workbench.config import RunConfig
    from workbench.planner.memory import predict_memory
    from workbench.strategies import validate_config

    model, optimizer = mlp((8,), 3, (32, 32, 32)), make_optimizer("sgd")

    def activations(schedule: str) -> list[int]:
        config = validate_config(
            RunConfig(strategy="pipeline", devices=2, stages=2, microbatches=4, schedule=schedule)
        )
        peaks = predict_memory(config, model, optimizer, ["a", "b"], fixed_costs())
        return [peaks[d].by_category["activations"] for d in ("a", "b")]

    zero_bubble, one_f_one_b = activations("zero-bubble"), activations("1f1b")
    # The first stage holds P micro-batches under both; the last, 1F1B's one, holds P while
    # its weight gradients wait.
    assert zero_bubble[0] == one_f_one_b[0]
    assert one_f_one_b[1] < zero_bubble[1] <= 2 * one_f_one_b[1]


def test_an_interleaved_stage_holds_its_chunks_and_hands_over_twice_as_often():
    import numpy as np

    from workbench.config import RunConfig
    from workbench.parallel.pipeline.stages import chunk_layers
    from workbench.planner.memory import predict_memory
    from workbench.strategies import validate_config

    model, optimizer = mlp((8,), 3, (16, 24, 32, 40, 48, 56, 64)), make_optimizer("sgd")

    def peaks(schedule: str) -> dict:
        config = validate_config(
            RunConfig(strategy="pipeline", devices=2, stages=2, microbatches=4, schedule=schedule)
        )
        return predict_memory(config, model, optimizer, ["a", "b"], fixed_costs())

    interleaved, one_f_one_b = peaks("interleaved-1f1b"), peaks("1f1b")
    shapes = model.parameter_shapes()
    for stage, device in enumerate("ab"):
        names = [n for r in chunk_layers(model, 2, 2, stage) for n in model.parameter_names(r)]
        expected = sum(int(np.prod(shapes[n])) for n in names) * 4  # float32
        assert interleaved[device].by_category["parameters"] == expected
        assert expected != one_f_one_b[device].by_category["parameters"]
        held = interleaved[device].by_category["communication"]
        assert held > one_f_one_b[device].by_category["communication"]
