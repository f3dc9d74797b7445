"""The stage workers run interleaved 1F1B (model chunks s, s+P, ... on device s) and
zero-bubble (each backward split into its input- and weight-gradient halves) and end where the
one-device oracle ends (docs/architecture/determinism.md, "Same data, same result"): float64
within 1e-10 relative, as a pipeline, as hybrid (2 replicas x 2 stages) and through the GPU
double."""

import pytest

from tests.parallel.test_equivalence import BASE, assert_same_parameters
from workbench.config import RunConfig
from workbench.launch.runner import run_training

pytestmark = pytest.mark.integration

QUIET = {"progress": lambda _: None}
# Four layers, so that 2 stages x 2 virtual stages give every chunk one; a few steps.
DEEP = {**BASE, "hidden": (16, 16, 16), "steps": 6}
DEEP_ORACLES: dict = {}
INTERLEAVED = {"schedule": "interleaved-1f1b", "virtual_stages": 2, "microbatches": 4}
ZERO_BUBBLE = {"schedule": "zero-bubble", "microbatches": 4}


def deep_oracle():
    if not DEEP_ORACLES:
        DEEP_ORACLES["float64"] = run_training(RunConfig(dtype="float64", **DEEP), **QUIET)
    return DEEP_ORACLES["float64"]


def _actions(result) -> set[str]:
    return {event.action for event in result.log.phases() if event.action}


def _check(result, reference) -> None:
    assert_same_parameters(result, reference, 1e-10)
    assert result.summary["final_loss"] == pytest.approx(reference.summary["final_loss"], rel=1e-10)
    assert 0.0 <= result.summary["bubble_fraction"] < 1.0


def test_interleaved_1f1b_matches_one_device(no_leftover_processes):
    flags = {"strategy": "pipeline", "devices": 2, "stages": 2, **INTERLEAVED}
    result = run_training(RunConfig(dtype="float64", **DEEP, **flags), **QUIET)
    _check(result, deep_oracle())
    # Every device ran both of its chunks, forward and backward, for every micro-batch.
    actions = _actions(result)
    for chunk in ("", "@1"):
        for kind in "FB":
            assert {f"{kind}{m}{chunk}" for m in range(4)} <= actions


@pytest.mark.parametrize("devices", [2, 4])
def test_zero_bubble_matches_one_device(devices, no_leftover_processes):
    # On 4 stages, later stages hold up to 3 weight halves back (ZB-H1's deferral).
    flags = {"strategy": "pipeline", "devices": devices, "stages": devices, **ZERO_BUBBLE}
    result = run_training(RunConfig(dtype="float64", **DEEP, **flags), **QUIET)
    _check(result, deep_oracle())
    # Split backwards only: input-gradient halves (but the first stage's) and weight halves.
    actions = _actions(result)
    assert {f"W{m}" for m in range(4)} | {f"I{m}" for m in range(4)} <= actions
    assert not any(action.startswith("B") for action in actions)


@pytest.mark.parametrize(
    ("devices", "stages", "schedule"),
    [(4, 2, INTERLEAVED), (4, 2, ZERO_BUBBLE), (2, 1, INTERLEAVED)],
    ids=["2x2-interleaved-1f1b", "2x2-zero-bubble", "2x1-interleaved-1f1b"],
)
def test_hybrid_runs_the_new_schedules_on_each_replica(
    devices, stages, schedule, no_leftover_processes
):
    """2 replicas x 2 stages; and 2 replicas of one stage holding both chunks, which hand
    over on the device."""
    flags = {"strategy": "hybrid", "devices": devices, "stages": stages, **schedule}
    result = run_training(RunConfig(dtype="float64", **DEEP, **flags), **QUIET)
    _check(result, deep_oracle())


@pytest.mark.gpu_path
def test_interleaved_1f1b_through_the_gpu_double(cpu_double_gpus, no_leftover_processes):
    """Chunks, stashes and hand-offs stay device arrays (the strict double refuses a NumPy
    array in a kernel), and the result is the CPU oracle's."""
    flags = {"strategy": "pipeline", "devices": 2, "stages": 2, **INTERLEAVED}
    result = run_training(RunConfig(device_type="gpu", dtype="float64", **DEEP, **flags), **QUIET)
    assert result.summary["device_type"] == "gpu"
    _check(result, deep_oracle())
