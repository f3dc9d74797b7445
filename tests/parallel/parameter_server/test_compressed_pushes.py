"""``--compression`` on parameter-server pushes: each worker encodes its gradients (with its own
error feedback), each shard decodes them before it averages; ``--json`` says what was saved."""

import pytest

from workbench.config import RunConfig
from workbench.launch.runner import run_training

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("compression", "ratio"),
    [("fp16", 2.0), ("topk:0.05", 10.0), ("powersgd:2", 4.0)],
)
def test_compressed_pushes_train_and_report_the_bytes_saved(
    compression, ratio, no_leftover_processes
):
    config = RunConfig(
        strategy="parameter-server",
        devices=2,
        ps=2,
        compression=compression,
        hidden=(64,),
        steps=60,
        batch_size=64,
    )
    result = run_training(config, progress=lambda _: None)
    summary = result.summary["compression"]
    assert summary["method"] == compression
    # float32 gradients: fp16 halves them; top-k sends (int32 index, float32 value) for 5%;
    # PowerSGD rank 2 sends P and Q of the 64 x 64 kernel, the rest (vectors, the small
    # classifier) dense.
    assert summary["compressed_bytes"] * ratio <= summary["gradient_bytes"] * 1.02
    assert result.summary["final_loss"] < 1.0  # from ~2.3: the error feedback keeps it learning
