"""Pipeline schedules, checked by simulation: complete, deadlock-free, bounded memory, and the
bubble the papers predict."""

import pytest

from workbench.parallel.pipeline import (
    ScheduleError,
    StageAction,
    gpipe_bubble,
    make_schedule,
    play_schedule,
)

SIZES = [(p, m) for p in range(1, 7) for m in range(1, 13)]


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("stages", "microbatches"), SIZES)
def test_every_schedule_runs_to_completion(name, stages, microbatches):
    result = play_schedule(make_schedule(name, stages, microbatches))
    assert len(result.finish) == 2 * stages * microbatches


@pytest.mark.parametrize(("stages", "microbatches"), SIZES)
def test_1f1b_keeps_at_most_min_p_minus_s_and_m_in_flight(stages, microbatches):
    result = play_schedule(make_schedule("1f1b", stages, microbatches))
    for stage, peak in enumerate(result.peak_in_flight):
        assert peak <= min(stages - stage, microbatches)
    gpipe = play_schedule(make_schedule("gpipe", stages, microbatches))
    assert all(peak == microbatches for peak in gpipe.peak_in_flight)


@pytest.mark.parametrize(("stages", "microbatches"), SIZES)
def test_gpipe_bubble_matches_the_paper_with_uniform_stages(stages, microbatches):
    result = play_schedule(make_schedule("gpipe", stages, microbatches), 1.0, 2.0)
    assert result.bubble_fraction == pytest.approx(gpipe_bubble(stages, microbatches))
    one_f_one_b = play_schedule(make_schedule("1f1b", stages, microbatches), 1.0, 2.0)
    assert one_f_one_b.makespan == pytest.approx(result.makespan)


def test_broken_schedules_are_caught():
    with pytest.raises(ScheduleError, match="deadlock"):
        # Stage 0 wants B0 before F1, but stage 1 runs F1 first and B0 only after it.
        play_schedule(
            [
                [
                    StageAction("F", 0),
                    StageAction("B", 0),
                    StageAction("F", 1),
                    StageAction("B", 1),
                ],
                [
                    StageAction("F", 1),
                    StageAction("F", 0),
                    StageAction("B", 0),
                    StageAction("B", 1),
                ],
            ]
        )
    with pytest.raises(ScheduleError, match="once"):
        play_schedule([[StageAction("F", 0), StageAction("F", 0), StageAction("B", 0)]])


def test_unknown_schedule_lists_the_choices():
    with pytest.raises(ValueError, match="gpipe, 1f1b"):
        make_schedule("zigzag", 2, 2)
