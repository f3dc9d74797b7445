"""``--accumulate K``: K micro-steps on consecutive slices of each replica's rows, one exchange
and one update, equal to one pass over the same global batch (float64, 1e-10 relative) on one
device, mirrored (2 and 4 devices), central storage and parameter servers, on CPUs and through
the GPU double; and refused, naming the flag, where it does not fit."""

import numpy as np
import pytest
from distributed import LocalCluster

from tests.parallel.test_equivalence import assert_same_parameters
from workbench.config import ConfigError, RunConfig
from workbench.launch.runner import run_training
from workbench.strategies import validate_config

FLAGS = {"steps": 4, "hidden": (32, 16), "lr_decay": "none", "dtype": "float64"}
QUIET = {"progress": lambda _: None}


@pytest.fixture(scope="module")
def one_pass():
    """One device, one pass over each global batch of 32: what every accumulated run equals."""
    return run_training(RunConfig(**FLAGS), **QUIET)


@pytest.fixture(scope="module")
def cluster():
    """Four workers shared by the cluster runs (a cluster's start is most of a short run)."""
    with LocalCluster(
        n_workers=4, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as local:
        yield local.scheduler_address


@pytest.mark.integration
@pytest.mark.parametrize("micro_steps", [2, 4])
def test_one_device_accumulation_equals_one_pass(one_pass, micro_steps):
    result = run_training(RunConfig(accumulate=micro_steps, **FLAGS), **QUIET)
    assert_same_parameters(result, one_pass, 1e-10)
    assert result.summary["final_loss"] == pytest.approx(one_pass.summary["final_loss"], 1e-12)
    assert result.summary["accumulate"] == micro_steps
    assert result.summary["micro_batch_size"] == 32 // micro_steps


CLUSTER_RUNS = [
    {"strategy": "mirrored", "devices": 2, "accumulate": 2},
    {"strategy": "mirrored", "devices": 4, "accumulate": 2, "allreduce": "hierarchical-copy"},
    # Several buckets: the ones filled early in the last micro-step's backward go out first.
    {"strategy": "mirrored", "devices": 4, "accumulate": 4, "bucket_mb": 0.004},
    # In-graph: a tower per micro-step, summed on its device before the all-reduce.
    {"strategy": "mirrored", "devices": 2, "accumulate": 2, "replication": "in-graph"},
    {"strategy": "mirrored", "devices": 4, "accumulate": 2, "replication": "in-graph"},
    {"strategy": "central-storage", "devices": 2, "accumulate": 4},
    {"strategy": "multi-worker-mirrored", "devices": 2, "accumulate": 2},
    {"strategy": "parameter-server", "devices": 2, "ps": 1, "accumulate": 2},
    {"strategy": "parameter-server", "devices": 2, "ps": 2, "accumulate": 4},
    {"strategy": "sharded", "devices": 2, "zero_stage": 2, "accumulate": 2},
    {"strategy": "sharded", "devices": 4, "zero_stage": 3, "accumulate": 2},
]


@pytest.mark.integration
@pytest.mark.parametrize("flags", CLUSTER_RUNS, ids=lambda f: "-".join(map(str, f.values())))
def test_accumulated_data_parallel_steps_equal_one_pass(one_pass, cluster, flags):
    result = run_training(RunConfig(cluster=cluster, no_calibrate=True, **FLAGS, **flags), **QUIET)
    assert_same_parameters(result, one_pass, 1e-10)
    assert result.summary["micro_batch_size"] == 32 // flags["devices"] // flags["accumulate"]
    # One exchange per step on every replica: an all-reduce or a push (a shard's are apart).
    exchanges = [e.device for e in result.log.phases() if e.phase in ("allreduce", "ps-push")]
    replicas = {device for device in exchanges if "/job:ps/" not in device}
    assert len(replicas) == flags["devices"]
    assert all(exchanges.count(device) == FLAGS["steps"] for device in replicas)


@pytest.mark.integration
@pytest.mark.gpu_path
def test_accumulated_mirrored_on_the_double_gpu_equals_one_pass(
    one_pass, cpu_double_gpus, no_leftover_processes
):
    result = run_training(
        RunConfig(device_type="gpu", strategy="mirrored", devices=2, accumulate=2, **FLAGS),
        **QUIET,
    )
    assert result.summary["device_type"] == "gpu"
    assert result.summary["micro_batch_size"] == 8
    assert_same_parameters(result, one_pass, 1e-10)


@pytest.mark.integration
def test_a_micro_step_keeps_fewer_activations_and_the_buffers_count_as_gradients(cluster):
    runs = {
        micro_steps: run_training(
            RunConfig(
                cluster=cluster,
                no_calibrate=True,
                strategy="mirrored",
                devices=2,
                accumulate=micro_steps,
                **FLAGS,
            ),
            **QUIET,
        ).summary["memory"]
        for micro_steps in (1, 4)
    }
    for device, one_pass_peaks in runs[1].items():
        whole, micro = one_pass_peaks["by_category"], runs[4][device]["by_category"]
        assert whole["gradients"] == whole["parameters"]
        # The buffers beside the gradients of the micro-step being added in.
        assert micro["gradients"] == 2 * whole["parameters"]
        assert micro["activations"] < whole["activations"]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ({"strategy": "mirrored", "devices": 2, "batch_size": 30, "accumulate": 4}, "24 or 32"),
        ({"batch_size": 10, "accumulate": 4}, "--batch-size that 4 divides"),
        ({"strategy": "pipeline", "devices": 2, "accumulate": 2}, "--microbatches"),
        ({"strategy": "hybrid", "devices": 4, "stages": 2, "accumulate": 2}, "--microbatches"),
        ({"strategy": "model-parallel", "devices": 2, "accumulate": 2}, "applies to"),
        (
            {
                "strategy": "central-storage",
                "devices": 2,
                "replication": "in-graph",
                "accumulate": 2,
            },
            "use between-graph",
        ),
        (
            {
                "strategy": "parameter-server",
                "devices": 2,
                "replication": "in-graph",
                "accumulate": 2,
            },
            "use between-graph",
        ),
    ],
)
def test_accumulation_that_does_not_fit_is_refused_naming_the_flag(flags, words):
    with pytest.raises(ConfigError) as refused:
        validate_config(RunConfig(**flags))
    assert refused.value.field == "--accumulate"
    assert words in str(refused.value)


def test_the_last_micro_step_hands_on_each_mean_as_backward_produces_it():
    """What a replica's bucket callback sees during the last micro-step: each gradient's mean
    over the micro-steps as soon as it appears, the others still in their buffers."""
    from workbench.training.gradient_accumulation import GradientSum

    total = GradientSum(2, np)
    total.add("w", np.array([1.0, 2.0]))
    total.add("b", np.array([5.0]))
    seen = []
    fetched, means = total.finish_on_fetch(lambda key, value: seen.append((key, value)), "grad/")
    fetched("grad/w", np.array([3.0, 4.0]))
    fetched("loss", 0.5)
    assert [key for key, _ in seen] == ["grad/w", "loss"]
    np.testing.assert_array_equal(seen[0][1], [2.0, 3.0])
    assert seen[0][1] is means["w"] and list(total.buffers) == ["b"]
