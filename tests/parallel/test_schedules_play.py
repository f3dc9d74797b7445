"""Every pipeline schedule played without Dask: complete, deadlock-free, its in-flight bound,
and its played bubble against its formula (docs/guide/distributed-training.md)."""

from __future__ import annotations

import pytest

from workbench.parallel.pipeline import (
    SCHEDULE_NAMES,
    ActionCosts,
    ScheduleError,
    StageAction,
    bubble_formula,
    make_schedule,
    play,
)

STAGES = range(1, 7)
MICROBATCHES = range(1, 13)


def _settings() -> list[tuple[str, int, int, int]]:
    """Every (schedule, P, M, V) the schedules take, with V in 2..3 for interleaved-1f1b."""
    settings = []
    for name in SCHEDULE_NAMES:
        for p in STAGES:
            for m in MICROBATCHES:
                for v in (2, 3) if name == "interleaved-1f1b" else (1,):
                    if name != "interleaved-1f1b" or m % p == 0:
                        settings.append((name, p, m, v))
    return settings


def _chunk_costs(virtual_stages: int) -> ActionCosts:
    """A chunk does 1/V of a whole stage's work (F = 1, B = 2, I = W = 1 per stage)."""
    return ActionCosts(*(cost / virtual_stages for cost in (1.0, 2.0, 1.0, 1.0)))


def test_every_schedule_is_complete_and_deadlock_free():
    for name, p, m, v in _settings():
        schedule = make_schedule(name, p, m, v)
        assert len(schedule) == p
        played = play(schedule, _chunk_costs(v))
        for device, actions in enumerate(schedule):
            units = {(a.chunk, a.microbatch) for a in actions}
            assert units == {(c, mb) for c in range(v) for mb in range(m)}, (name, p, m, v)
            assert all(played.ends[(device, a)] > 0 for a in actions)


def test_the_action_strings_name_kind_micro_batch_and_chunk():
    assert [str(a) for a in make_schedule("zero-bubble", 2, 2)[1]] == [
        "F0", "I0", "F1", "I1", "W0", "W1"
    ]  # fmt: skip
    assert str(StageAction("F", 3, 1)) == "F3@1"
    # Megatron's order on the first of 2 devices, V = 2, M = 4: P forwards per chunk in turn.
    assert [str(a) for a in make_schedule("interleaved-1f1b", 2, 4, 2)[0][:6]] == [
        "F0", "F1", "F0@1", "F1@1", "F2", "B0@1"
    ]  # fmt: skip


@pytest.mark.parametrize("p,m", [(2, 2), (4, 8), (6, 12)])
def test_gpipe_and_1f1b_are_unchanged(p, m):
    assert [str(a) for a in make_schedule("gpipe", p, m)[0]] == [
        *(f"F{i}" for i in range(m)),
        *(f"B{i}" for i in reversed(range(m))),
    ]
    last = make_schedule("1f1b", p, m)[p - 1]
    assert [str(a) for a in last] == [f"{k}{i}" for i in range(m) for k in "FB"]


def test_in_flight_bounds():
    for name, p, m, v in _settings():
        peak = play(make_schedule(name, p, m, v), _chunk_costs(v)).peak_in_flight
        for s in range(p):
            if name == "gpipe":
                assert peak[s] == m
            elif name == "1f1b":
                assert peak[s] == min(p - s, m)
            elif name == "zero-bubble":
                # Every stage holds P (until the postponed W): 1F1B's first stage's peak.
                assert peak[s] == min(p, m)
            elif m == p:
                assert peak[s] == v * m  # Megatron runs every forward first when M = P
            else:
                # Megatron's warm-up plus the one in steady state, in chunks of 1/V a stage.
                assert peak[s] == min(2 * (p - s - 1) + (v - 1) * p + 1, v * m)


def test_interleaved_and_zero_bubble_idle_less_than_1f1b():
    for name, p, m, v in _settings():
        if name in ("interleaved-1f1b", "zero-bubble") and p >= 2 and m >= p:
            costs = _chunk_costs(v)
            ours = play(make_schedule(name, p, m, v), costs).bubble_fraction
            one_f_one_b = play(make_schedule("1f1b", p, m), _chunk_costs(1)).bubble_fraction
            assert ours < one_f_one_b - 1e-9, (name, p, m, v)


def test_each_played_bubble_equals_its_formula():
    for name, p, m, v in _settings():
        if name == "zero-bubble" and m < p:
            continue  # fewer micro-batches than stages leave ZB-H1 less to postpone
        costs = _chunk_costs(v)
        played = play(make_schedule(name, p, m, v), costs).bubble_fraction
        assert played == pytest.approx(bubble_formula(name, p, m, v, costs), abs=1e-12), (
            name,
            p,
            m,
            v,
        )


@pytest.mark.parametrize(
    "forward,input_grad,weight_grad", [(1, 2, 1), (2, 1, 0.5), (1, 1, 2), (0.5, 2, 1)]
)
def test_zero_bubble_formula_follows_the_per_kind_costs(forward, input_grad, weight_grad):
    costs = ActionCosts(forward, input_grad + weight_grad, input_grad, weight_grad)
    played = play(make_schedule("zero-bubble", 4, 8), costs).bubble_fraction
    assert played == pytest.approx(bubble_formula("zero-bubble", 4, 8, costs=costs))
    # A third of 1F1B's bubble time with F = I = W.
    even = ActionCosts(1, 2, 1, 1)
    ratio = (4 - 1) * 1 / ((4 - 1) * 3)
    zb, base = (play(make_schedule(n, 4, 8), even) for n in ("zero-bubble", "1f1b"))
    idle = [r.makespan * 4 - sum(r.busy) for r in (zb, base)]
    assert idle[0] / idle[1] == pytest.approx(ratio)


def test_interleaved_needs_micro_batches_in_groups_of_the_stages():
    with pytest.raises(ScheduleError, match="--microbatches"):
        make_schedule("interleaved-1f1b", 4, 6, 2)
    # One chunk per device is 1F1B.
    assert make_schedule("interleaved-1f1b", 4, 6, 1) == make_schedule("1f1b", 4, 6)


def test_a_split_backward_must_be_whole():
    with pytest.raises(ScheduleError, match="either B or I and W"):
        play([[StageAction("F", 0), StageAction("I", 0)]], ActionCosts())
    with pytest.raises(ScheduleError, match="either B or I and W"):
        play(
            [[StageAction("F", 0), StageAction("I", 0), StageAction("W", 0), StageAction("B", 0)]],
            ActionCosts(),
        )


def test_a_weight_gradient_before_its_input_gradient_deadlocks():
    with pytest.raises(ScheduleError, match="deadlock"):
        play([[StageAction("F", 0), StageAction("W", 0), StageAction("I", 0)]], ActionCosts())


def test_a_chunk_waits_for_the_previous_model_chunk_on_the_other_device():
    # Model chunk 1 (device 1, chunk 0) before chunk 2 (device 0, chunk 1): device 0 running its
    # second chunk's forward before device 1's first is a deadlock.
    first = [
        StageAction("F", 0, 1),
        StageAction("F", 0),
        StageAction("B", 0),
        StageAction("B", 0, 1),
    ]
    second = [
        StageAction("F", 0),
        StageAction("F", 0, 1),
        StageAction("B", 0, 1),
        StageAction("B", 0),
    ]
    with pytest.raises(ScheduleError, match="deadlock"):
        play([first, second], ActionCosts())
