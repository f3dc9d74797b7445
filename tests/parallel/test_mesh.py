"""``--strategy mesh``: data x tensor x pipeline parallelism on four devices ends where
one-device training ends (float64, 1e-10 relative; docs/architecture/determinism.md), on CPUs
and through the GPU double; a tensor-split stage's all-reduces are phases of their own; the
run's variables and checkpoints come back whole, and a one-device checkpoint resumes under
the mesh."""

from collections import Counter
from itertools import pairwise

import numpy as np
import pytest

from tests.parallel.test_equivalence import BASE, assert_same_parameters
from workbench.checkpoint import load_checkpoint
from workbench.config import RunConfig
from workbench.events.records import Phase
from workbench.launch.runner import run_training

pytestmark = pytest.mark.integration

QUIET = {"progress": lambda _: None}
# A few steps show every exchange: the reference is cheap, the mesh's cluster is not.
SMALL = {**BASE, "steps": 3, "dtype": "float64"}
REFERENCES: dict = {}


def reference(**flags):
    """one-device training of the same run (``flags``: the model, steps, device type)."""
    key = tuple(sorted(flags.items()))
    if key not in REFERENCES:
        REFERENCES[key] = run_training(RunConfig(**{**SMALL, **flags}), **QUIET)
    return REFERENCES[key]


def mesh_run(mesh: str, **flags):
    config = RunConfig(strategy="mesh", devices=4, mesh=mesh, **{**SMALL, **flags})
    return run_training(config, **QUIET)


def assert_phases_in_turn(result) -> None:
    """A device runs on one thread: its phases follow one another, none inside another."""
    for device in {event.device for event in result.log.phases()}:
        spans = sorted((e.start, e.end) for e in result.log.phases(device))
        assert all(end <= later for (_, end), (later, _) in pairwise(spans)), device


@pytest.mark.parametrize(
    ("mesh", "flags"),
    [
        ("dp=2,tp=2,pp=1", {}),
        ("dp=2,tp=1,pp=2", {"schedule": "1f1b"}),
        # Four model chunks: the tensor split goes chunk by chunk (the last one's Dense pair).
        (
            "dp=1,tp=2,pp=2",
            {"schedule": "interleaved-1f1b", "virtual_stages": 2, "hidden": (16, 16, 16)},
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else value.get("schedule", "gpipe"),
)
def test_a_four_device_mesh_matches_one_device(mesh, flags, no_leftover_processes):
    result = mesh_run(mesh, **flags)
    expected = reference(**{k: v for k, v in flags.items() if k == "hidden"})
    assert_same_parameters(result, expected, 1e-10)
    assert result.summary["final_loss"] == pytest.approx(expected.summary["final_loss"], rel=1e-10)
    assert_phases_in_turn(result)
    # A pipeline's bubble; a mesh without stages has none.
    assert (result.summary["bubble_fraction"] is None) == ("pp=1" in mesh)
    devices = sorted({event.device for event in result.log.phases()})
    assert len(devices) == 4
    reduces = Counter((e.device, e.step) for e in result.log.phases() if e.phase == Phase.ALLREDUCE)
    data = 1 if "dp=2" in mesh else 0  # the data group's gradient all-reduce (one bucket)
    tensor = max(reduces.values(), default=0) - data
    if "tp=2" in mesh:
        # At least one all-reduce per micro-batch (4) in a split chunk's forward: its row
        # split's partial sums (a chunk holding one Dense runs whole on both ranks).
        assert tensor >= 4, reduces
    else:
        assert tensor == 0, reduces


def test_the_transformer_splits_by_heads_in_a_zero_bubble_pipeline(no_leftover_processes):
    result = mesh_run(
        "dp=1,tp=2,pp=2", model="transformer", batch_size=8, microbatches=2, schedule="zero-bubble"
    )
    assert_same_parameters(result, reference(model="transformer", batch_size=8), 1e-10)


def test_a_mesh_on_the_double_gpus_matches_one_device_there(cpu_double_gpus, no_leftover_processes):
    result = mesh_run("dp=1,tp=2,pp=2", device_type="gpu")
    assert result.summary["device_type"] == "gpu"
    assert all("device:GPU" in device for device in {e.device for e in result.log.phases()})
    assert_same_parameters(result, reference(device_type="gpu"), 1e-10)


def test_a_one_device_checkpoint_resumes_under_the_mesh_and_saves_whole(
    tmp_path, no_leftover_processes
):
    run_training(RunConfig(**{**SMALL, "steps": 2}, save=str(tmp_path / "one")), **QUIET)
    result = run_training(
        RunConfig(
            strategy="mesh",
            devices=4,
            mesh="dp=2,tp=2,pp=1",
            resume=str(tmp_path / "one"),
            save=str(tmp_path / "mesh"),
            **SMALL,
        ),
        **QUIET,
    )
    assert result.summary["first_step"] == 2
    expected = reference()
    assert_same_parameters(result, expected, 1e-10)
    saved = load_checkpoint(tmp_path / "mesh")
    for name, value in expected.parameters.items():
        # Whole, tensor shards joined: the momentum slots too.
        assert saved.params[name].shape == value.shape, name
        assert saved.optimizer_state[f"{name}/momentum"].shape == value.shape, name
        scale = np.max(np.abs(value))
        assert np.max(np.abs(saved.params[name] - value)) <= 1e-10 * scale, name
