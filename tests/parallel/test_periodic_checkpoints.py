"""Periodic checkpoints: written every --checkpoint-every steps in the checkpoint format, the
last two kept, --save DIR holding the newest, and a run resumed from one ending where the
uninterrupted run ends."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from workbench.checkpoint import load_checkpoint
from workbench.config import RunConfig
from workbench.launch.runner import run_training
from workbench.parallel.periodic_checkpoints import PeriodicCheckpoints

SMALL = dict(hidden=(32, 16), dtype="float64", lr_decay="none", batch_size=32, seed=0)


def _into(directory: Path):
    def hook(job):
        return replace(job, checkpoint_directory=str(directory))

    return hook


@pytest.mark.integration
@pytest.mark.usefixtures("no_leftover_processes")
def test_mirrored_keeps_the_last_two_and_resuming_from_one_ends_the_same(tmp_path):
    config = RunConfig(strategy="mirrored", devices=2, steps=100, checkpoint_every=20, **SMALL)
    whole = run_training(
        config.replace(save=str(tmp_path / "final")),
        progress=lambda _: None,
        job_hook=_into(tmp_path / "periodic"),
    )
    kept = sorted(path.name for path in (tmp_path / "periodic").iterdir())
    assert kept == ["step-00000060", "step-00000080"]
    assert load_checkpoint(tmp_path / "final").step == 100
    resumed = run_training(
        config.replace(resume=str(tmp_path / "periodic" / "step-00000060")),
        progress=lambda _: None,
    )
    assert resumed.summary["first_step"] == 60
    for name, value in whole.parameters.items():
        scale = np.max(np.abs(value))
        assert np.max(np.abs(resumed.parameters[name] - value)) <= 1e-10 * scale, name


@pytest.mark.integration
def test_one_device_writes_them_only_when_asked(tmp_path):
    base = RunConfig(steps=30, **SMALL)
    run_training(base, progress=lambda _: None, job_hook=_into(tmp_path / "off"))
    assert not (tmp_path / "off").exists()
    run_training(
        base.replace(checkpoint_every=10), progress=lambda _: None, job_hook=_into(tmp_path / "on")
    )
    assert sorted(path.name for path in (tmp_path / "on").iterdir()) == [
        "step-00000010",
        "step-00000020",
    ]
    assert load_checkpoint(tmp_path / "on" / "step-00000020").step == 20


class _Job:
    """What PeriodicCheckpoints reads of a job, with a clock the test moves."""

    def __init__(self, every):
        self.config = RunConfig(checkpoint_every=every)
        self.checkpoint_directory = None
        self.first_step, self.total_steps = 0, 1000
        self.initial_parameters = self.initial_optimizer_state = None
        self.now = 0.0

    def clock(self):
        return self.now


def test_without_an_interval_a_checkpoint_falls_due_after_about_a_minute():
    job = _Job(None)
    checkpoints = PeriodicCheckpoints(job)
    job.now = 59.0
    assert not checkpoints.due(10)
    job.now = 61.0
    assert checkpoints.due(10)
    checkpoints.save(10, {"w": np.ones(2)}, {})
    assert not checkpoints.due(11)
    assert checkpoints.restart_point()[0] == 10
    assert not checkpoints.due(1000)  # the run's own end is execute_run's to save


def test_free_running_steps_that_jump_a_boundary_still_get_one():
    checkpoints = PeriodicCheckpoints(_Job(20))
    assert not checkpoints.due(19)
    assert checkpoints.due(23)
    checkpoints.save(23, {}, {})
    assert not checkpoints.due(39) and checkpoints.due(41)
