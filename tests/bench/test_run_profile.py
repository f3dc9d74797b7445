"""The e2e suite's profile: a whole run's CPU by part and its devices' timeline, and the
per-step difference of a long and a short profiled run."""

from __future__ import annotations

import pytest

from benchmarks.e2e_attribution import (
    device_phases_per_step,
    per_step_ms,
    profiled,
    render_attribution,
    render_device_phases,
)
from benchmarks.run_profile import device_phases, device_timeline
from workbench.events import EventLog


def test_the_timeline_splits_steps_gaps_within_a_task_and_gaps_between_tasks():
    log = EventLog()
    first_round, steps = 37, 40  # rounds need not be a fixed number of steps
    for device, offset in (("a", 0.0), ("b", 0.5)):
        start = offset
        for step in range(steps):
            log.phase(device, "compute", step, start, start + 1.0)
            log.phase(device, "allreduce", step, start + 0.5, start + 2.0)  # overlaps compute
            # 0.1 s between steps of a task, 3 s before the second task's first step.
            start += 2.0 + (3.0 if step + 1 == first_round else 0.1)
    for step in range(steps):  # each round's losses logged together once it is back
        log.scalar("loss", step, 1.0, 80.0 + 1e-5 * step if step < first_round else 200.0)
    figures = device_timeline(log)
    assert figures["busy"] == pytest.approx(2.0 * steps)
    assert figures["gaps_in_task"] == pytest.approx(0.1 * (steps - 2))
    assert figures["gaps_between_tasks"] == pytest.approx(3.0)
    assert figures["phase:compute"] == pytest.approx(1.0 * steps)
    assert figures["phase:allreduce"] == pytest.approx(1.5 * steps)


def test_each_device_s_phases_and_the_time_outside_them_are_kept_apart():
    log = EventLog()
    stage = "/job:worker/task:1/device:CPU:0"
    for step in range(3):
        start = 10.0 * step
        log.phase(stage, "recv", step, start, start + 2.0)
        log.phase(stage, "compute", step, start + 2.5, start + 6.0)  # 0.5 s between phases
        log.phase(stage, "send", step, start + 6.0, start + 7.0)  # then 3 s to the next step
    phases = device_phases(log)[stage]
    assert phases == pytest.approx(
        {"recv": 6.0, "compute": 10.5, "send": 3.0, "outside phases": 27.0 - 19.5}
    )
    short = {"device_phases": {stage: {"compute": 1.0}}}
    per_step = device_phases_per_step(short, {"device_phases": {stage: phases}}, 1000)
    assert per_step[stage]["compute"] == pytest.approx(9.5)  # ms: (10.5 - 1.0) s / 1000
    assert per_step[stage]["recv"] == pytest.approx(6.0)  # a phase the short run lacked
    table = "\n".join(render_device_phases("pipeline", per_step, 30.0))
    assert "| device | compute | recv | send | outside phases |" in table
    assert "| task1-cpu0 | 9.50 | 6.00 | 3.00 | 7.50 |" in table


def _profile(wall: float, busy: float, client: float, worker: float) -> dict:
    return {
        "wall_seconds_outside": wall,
        "timeline": {"busy": busy, "gaps_in_task": 0.0, "gaps_between_tasks": 0.5},
        "summary": {"global_batch_size": 256, "samples_per_second": 25_600.0},
        "client_cpu": {"MainThread": client, "(total)": 2 * client},
        "worker_cpu": [{"Dask-Default-Threads": worker, "(total)": worker}] * 2,
        "other_processes_cpu": 0.0,
    }


def test_the_difference_of_two_profiles_is_read_per_step():
    figures = per_step_ms(_profile(5.0, 1.0, 1.0, 2.0), _profile(15.0, 9.0, 2.0, 10.0), 1000)
    assert figures["end_to_end"] == pytest.approx(10.0)
    assert figures["timeline:busy"] == pytest.approx(8.0)
    assert figures["timeline:gaps_between_tasks"] == pytest.approx(0.0)
    assert figures["outside_timeline"] == pytest.approx(2.0)
    assert figures["run_steady_state"] == pytest.approx(10.0)
    assert figures["client:MainThread"] == pytest.approx(1.0)
    assert figures["client:IO loop"] == 0.0  # a thread absent from both reads 0
    assert figures["worker:Dask-Default-Threads"] == pytest.approx(8.0)
    table = "\n".join(render_attribution([figures], [9.0]))
    assert "| steady state as `bench ddp` measures it (run_training, 200 steps) | 9.00 |" in table


@pytest.mark.integration
def test_a_profiled_run_reports_every_part_of_a_real_cluster_run(tmp_path):
    # Steps long enough to read on CPU clocks that tick every 10 ms.
    flags = ["--strategy", "mirrored", "--devices", "2", "--hidden", "512,512"]
    flags += ["--batch-size", "256", "--dataset", "synthetic"]
    steps = 25  # two rounds
    profile = profiled([*flags, "--steps", str(steps), "--no-calibrate"], tmp_path, "run")
    assert profile["summary"]["steps"] == steps
    assert profile["wall_seconds_outside"] > profile["cluster_seconds"] > 0
    client = profile["client_cpu"]
    assert client["MainThread"] > 0 and client["(total)"] >= client["MainThread"]
    workers = profile["worker_cpu"]
    assert len(workers) == 2
    # The steps ran on each worker's task thread, while the cluster was watched.
    assert all(worker["Dask-Default-Threads"] > 0 for worker in workers)
    timeline = profile["timeline"]
    assert timeline["busy"] > 0 and timeline["phase:compute"] > 0
    assert timeline["gaps_between_tasks"] >= 0 and timeline["gaps_in_task"] >= 0
