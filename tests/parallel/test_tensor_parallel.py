"""``tensor-parallel`` ends where the one-device oracle ends (float64, 1e-10 relative) for the
MLP and the transformer presets on 2 and 4 devices, on CPUs and through the GPU double; each
device sends per step exactly Megatron's all-reduces (derived here, not read from the code);
checkpoints cross between one device and tensor parallelism; bad input is refused naming
the flag before anything starts."""

import pytest

from tests.parallel.test_equivalence import BASE, assert_same_parameters, oracle, ring_bytes
from tests.planner.test_predict import MODEL, NODE, OPTIMIZER, config, costs, executed
from workbench.cli.main import main
from workbench.config import ConfigError, RunConfig
from workbench.launch.runner import prepare_run, run_training
from workbench.notebook.graph_view import plan_view
from workbench.parallel.tensor_parallel.graph import forward_graph, rank_training_graph
from workbench.parallel.tensor_parallel.plan import tensor_plan
from workbench.planner.predict import predict
from workbench.simulate import Link
from workbench.store import STORE_ENVIRONMENT

pytestmark = pytest.mark.integration

QUIET = {"progress": lambda _: None}
BATCH = 32  # RunConfig's default global batch
ITEM = 8  # float64
# The transformer preset on digits: 8 row tokens of width 32, 2 blocks of 4 heads.
TRANSFORMER = {**BASE, "model": "transformer", "steps": 3}
TRANSFORMER_ORACLE: dict = {}


def megatron_bytes_per_step(model: str, devices: int) -> float:
    """What each device sends per step: a ring all-reduce of the activation (batch x width)
    after each row-split layer in forward, and one of the gradient of each column-split
    layer's input in backward where that input needs a gradient (Shoeybi et al. 2019, g and
    f). MLP (32, 16): one pair on the data (64 -> 32 -> 16), so one forward all-reduce of
    batch x 16 and none backward. Transformer: per block the attention pair and the MLP pair
    each all-reduce batch x tokens x width forward and backward (the blocks' inputs come from
    trained layers)."""
    if model == "mlp":
        return ring_bytes(BATCH * 16 * ITEM, devices)
    blocks, tokens, width = 2, 8, 32
    return blocks * 2 * 2 * ring_bytes(BATCH * tokens * width * ITEM, devices)


def transformer_oracle():
    if not TRANSFORMER_ORACLE:
        TRANSFORMER_ORACLE["result"] = run_training(
            RunConfig(dtype="float64", **TRANSFORMER), **QUIET
        )
    return TRANSFORMER_ORACLE["result"]


@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_tensor_parallel_matches_one_device_with_megatrons_traffic(
    model, devices, no_leftover_processes
):
    flags = TRANSFORMER if model == "transformer" else BASE
    result = run_training(
        RunConfig(
            strategy="tensor-parallel", devices=devices, tp=devices, dtype="float64", **flags
        ),
        **QUIET,
    )
    reference = transformer_oracle() if model == "transformer" else oracle("float64")
    assert_same_parameters(result, reference, 1e-10)
    assert result.summary["final_loss"] == pytest.approx(reference.summary["final_loss"], rel=1e-10)
    steps = result.summary["steps"]
    expected = steps * megatron_bytes_per_step(model, devices)
    per_device = result.summary["per_device"]
    assert len(per_device) == devices
    # Within 0.1%: the ring's chunks differ by at most one element.
    assert [d["bytes_sent"] for d in per_device] == pytest.approx([expected] * devices, rel=1e-3)
    assert [d["bytes_received"] for d in per_device] == pytest.approx(
        [expected] * devices, rel=1e-3
    )
    # Each device computes and all-reduces; the loss is reported once a step.
    for device in {event.device for event in result.log.phases()}:
        phases = {event.phase for event in result.log.phases(device)}
        assert {"compute", "allreduce"} <= {str(getattr(p, "value", p)) for p in phases}
    assert len(result.log.scalars("loss")) == steps


@pytest.mark.gpu_path
def test_tensor_parallel_on_double_gpus_matches_one_device(cpu_double_gpus, no_leftover_processes):
    result = run_training(
        RunConfig(
            strategy="tensor-parallel", devices=2, tp=2, device_type="gpu", dtype="float64", **BASE
        ),
        **QUIET,
    )
    assert result.summary["device_type"] == "gpu"
    assert all("device:GPU" in event.device for event in result.log.phases())
    assert_same_parameters(result, oracle("float64"), 1e-10)


def test_a_one_device_checkpoint_resumes_under_tensor_parallel_and_back(
    tmp_path, no_leftover_processes
):
    common = {"dtype": "float64", "hidden": (32, 16), "lr_decay": "none", "optimizer": "adam"}
    straight = run_training(RunConfig(steps=9, **common), **QUIET)
    first, second = str(tmp_path / "one"), str(tmp_path / "tensor")
    run_training(RunConfig(steps=3, save=first, **common), **QUIET)
    middle = run_training(
        RunConfig(
            strategy="tensor-parallel",
            devices=2,
            tp=2,
            steps=6,
            resume=first,
            save=second,
            **common,
        ),
        **QUIET,
    )
    assert middle.summary["first_step"] == 3
    assert middle.parameters["dense_0/kernel"].shape == (64, 32)  # gathered whole
    back = run_training(RunConfig(steps=9, resume=second, **common), **QUIET)
    assert back.summary["first_step"] == 6
    assert_same_parameters(back, straight, 1e-10)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"devices": 3, "tp": 3}, r"--tp: 3 tensor-parallel ranks do not divide dense_0's 32"),
        ({"devices": 4, "tp": 2}, r"--devices: .*--devices 4 must equal --tp 2"),
        (
            {"devices": 3, "tp": 3, "model": "transformer"},
            r"--tp: .*transformer_0's 4 attention heads",
        ),
    ],
)
def test_bad_input_is_a_config_error_naming_the_flag_before_anything_starts(flags, message):
    config = RunConfig(strategy="tensor-parallel", **{**BASE, **flags})
    with pytest.raises(ConfigError, match=message):
        prepare_run(config)


def test_the_plan_shows_each_ranks_split_graph_and_its_all_reduces(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(STORE_ENVIRONMENT, str(tmp_path))  # fixed rates: nothing cached there
    flags = ["--strategy", "tensor-parallel", "--tp", "2", "--devices", "2"]
    assert main(["plan", *flags, "--model", "transformer"]) == 0
    printed = capsys.readouterr().out
    assert "transformer_0      column and row split over 2 ranks" in printed
    assert "dense_0            replicated (whole on every rank)" in printed
    assert "per step 4 all-reduces forward and 4 backward" in printed
    assert printed.count("(0 send, 0 recv, 8 all-reduce)") == 2  # one partition per rank
    chart = plan_view(RunConfig(strategy="tensor-parallel", devices=2, tp=2, model="transformer"))
    nodes = next(r for r in chart.renderers if r.glyph.__class__.__name__ == "Scatter")
    data = nodes.data_source.data
    reduces = [d for op, d in zip(data["op"], data["device"]) if op == "all_reduce"]
    assert len(reduces) == 16 and len(set(reduces)) == 2
    assert data["marker"][data["op"].index("all_reduce")] == "diamond"
    segments = [r for r in chart.renderers if r.glyph.__class__.__name__ == "Segment"]
    assert len(segments[2].data_source.data["key"]) == 8  # one edge per collective
    assert "0 Send/Recv pairs, 8 all-reduces" in chart.title.text


def test_the_planner_predicts_each_ranks_split_graph_and_its_ring_all_reduces():
    # Every node 1 ms (tests/planner/test_predict.py): MLP 16-8-8-4, one pair on the data.
    setting = config(strategy="tensor-parallel", devices=2, tp=2)
    free = predict(setting, MODEL, OPTIMIZER, costs())
    forward = forward_graph(MODEL, 8, "float32")
    rank = rank_training_graph(MODEL, OPTIMIZER, forward, tensor_plan(MODEL, 2), 0, 2, ("a", "b"))
    assert free.step_seconds == pytest.approx(executed(rank) * NODE)
    # A 1 MB/s link: the one forward all-reduce of batch 8 x 8 float32 (256 bytes), of which
    # a ring puts 2(N-1)/N on each link.
    slow = predict(setting, MODEL, OPTIMIZER, costs(Link(0.0, 1e6)))
    assert slow.step_seconds - free.step_seconds == pytest.approx(ring_bytes(256, 2) / 1e6)
