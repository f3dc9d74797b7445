"""Mixed precision without a cluster: every op computes in float16 and bfloat16 the dtype its
shape rule declares; the training graph computes in 16 bits on the 16-bit copies with the
loss in float32 and float32 gradients divided by the loss scale; the update refreshes the
copies from the float32 masters; an overflowing step is skipped and the scale halves; bad
combinations are refused naming --precision; the CuPy double refuses bfloat16 as CuPy 13
does."""

import numpy as np
import pytest

from tests.gpu_double import fake_cupy
from tests.ir.op_zoo import CASES, fixed_feeds
from workbench.config import ConfigError, RunConfig
from workbench.events import EventLog
from workbench.ir import Executable, GraphBuilder, gradients, ops
from workbench.models import mlp
from workbench.optim import SGD, Momentum, compute_copy_name, init_slots
from workbench.parallel.mixed_precision import LossScaledStep, precision_summary
from workbench.parallel.worker_spec import WorkerSpec, host_snapshot, initial_state
from workbench.runtime.device_arrays import DeviceArrays
from workbench.runtime.device_probe import bfloat16_obstacle, describe_device
from workbench.strategies import validate_config
from workbench.strategies.precision import check_precision_on_device
from workbench.training.graphs import (
    LOSS_SCALE,
    build_training_graph,
    build_update_graph,
    gradient_name,
)
from workbench.training.session import TrainingSession

HALVES = ("float16", "bfloat16")
MODEL = mlp((8,), 3, (6,))


@pytest.mark.parametrize("xp", [np, fake_cupy], ids=["numpy", "cupy-double"])
@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id or case.op)
def test_every_op_computes_16_bit_inputs_in_the_dtype_its_shape_rule_declares(case, dtype, xp):
    """On NumPy and on the CuPy double, as strict as CuPy 14 (no batched bfloat16 product, no
    bfloat16 add.at): where a kernel lacks a 16-bit type the op widens, and its result still
    has the declared dtype."""
    builder = GraphBuilder()
    inputs = [builder.placeholder(f"in{i}", s, dtype) for i, s in enumerate(case.float_inputs)]
    output = case.build(builder, *inputs)
    loss = ops.reduce_sum(ops.cast(output, "float32"))
    grads = gradients(builder, loss, inputs)
    graph = builder.build({"loss": loss, **{f"grad{i}": g for i, g in enumerate(grads)}})
    rng = np.random.default_rng(0)
    feeds = {name: xp.asarray(value) for name, value in fixed_feeds(case).items()}
    for i, shape in enumerate(case.float_inputs):
        drawn = rng.uniform(0.5, 2.0, shape) if case.positive else rng.normal(size=shape)
        feeds[f"in{i}"] = xp.asarray(drawn.astype(dtype))
    wrong = []

    def check(node, result) -> None:
        results = result if len(node.types) != 1 else (result,)
        for declared, value in zip(node.types, results):
            if str(value.dtype) != declared.dtype:
                wrong.append(f"{node.name} ({node.op}): {value.dtype} != {declared}")

    Executable(graph).run(feeds, None, xp, on_node=check)
    assert wrong == []


@pytest.mark.parametrize("precision, half", [("mixed-fp16", "float16"), ("mixed-bf16", "bfloat16")])
def test_the_training_graph_computes_in_16_bits_with_the_loss_and_gradients_in_float32(
    precision, half
):
    graph = build_training_graph(MODEL, None, 4, "float32", precision=precision).graph
    reads = {n.attrs["var"]: n.types[0].dtype for n in graph.nodes_with_op("variable")}
    assert reads == {compute_copy_name(name): half for name in MODEL.parameter_shapes()}
    (loss_node,) = graph.nodes_with_op("softmax_cross_entropy")
    assert graph.type_of(loss_node.inputs[0]).dtype == "float32"  # the logits, cast back
    assert {graph.type_of(n.inputs[0]).dtype for n in graph.nodes_with_op("matmul")} == {half}
    casts = {
        (graph.type_of(n.inputs[0]).dtype, n.attrs["dtype"]) for n in graph.nodes_with_op("cast")
    }
    assert {("float32", half), (half, "float32")} <= casts  # inputs down, logits and grads up
    assert graph.node(LOSS_SCALE).op == "placeholder"
    for name in MODEL.parameter_shapes():
        assert graph.type_of(graph.outputs[gradient_name(name)]).dtype == "float32"


@pytest.mark.parametrize("precision, tolerance", [("mixed-fp16", 2e-3), ("mixed-bf16", 2e-2)])
def test_gradients_come_back_divided_by_the_loss_scale_close_to_float32_ones(precision, tolerance):
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(4, 8)).astype(np.float32), np.array([0, 1, 2, 1])
    params = MODEL.init_parameters(0, "float32")
    full = Executable(build_training_graph(MODEL, None, 4, "float32").graph)
    expected = full.run({"inputs": x, "labels": y}, dict(params))
    mixed = Executable(build_training_graph(MODEL, None, 4, "float32", precision=precision).graph)
    half = "float16" if precision == "mixed-fp16" else "bfloat16"
    state = {**params, **{compute_copy_name(n): v.astype(half) for n, v in params.items()}}
    for scale in (1.0, 1024.0):
        feeds = {"inputs": x, "labels": y, LOSS_SCALE: np.float32(scale)}
        got = mixed.run(feeds, state)
        assert got["loss"].dtype == np.float32
        for name in params:
            gradient = got[gradient_name(name)]
            assert gradient.dtype == np.float32
            reference = expected[gradient_name(name)]
            scale_of = np.abs(reference).max()
            np.testing.assert_allclose(gradient, reference, atol=tolerance * scale_of)


def test_the_update_changes_the_float32_master_and_refreshes_its_16_bit_copy():
    params = MODEL.init_parameters(0, "float32")
    state = {
        **{name: value.copy() for name, value in params.items()},
        **init_slots(Momentum(), params),
        **{compute_copy_name(n): v.astype("bfloat16") for n, v in params.items()},
    }
    update = Executable(build_update_graph(MODEL, Momentum(), "float32", precision="mixed-bf16"))
    feeds = {gradient_name(n): np.full(v.shape, 0.5, np.float32) for n, v in params.items()}
    update.run({**feeds, "learning_rate": np.float32(0.1)}, state)
    for name, before in params.items():
        assert state[name].dtype == np.float32
        np.testing.assert_allclose(state[name], before - 0.05, rtol=1e-6)
        copy = state[compute_copy_name(name)]
        assert copy.dtype.name == "bfloat16"
        np.testing.assert_array_equal(copy, state[name].astype("bfloat16"))


def test_a_step_whose_16_bit_gradients_overflow_is_skipped_and_the_scale_halves():
    session = TrainingSession(MODEL, SGD(), 4, "float32", seed=0)
    mixed = LossScaledStep(session, "mixed-fp16")
    before = session.parameters()
    mixed.scaler.scale = 2.0**40  # float16 holds at most 65504: backward overflows
    x, y = np.full((4, 8), 3.0, np.float32), np.array([0, 1, 2, 1])
    loss = mixed.step(x, y, 0.1, step=0)
    assert np.isfinite(loss)  # the loss is float32, scaled only on the way back
    assert (mixed.applied, mixed.scaler.skipped_steps, mixed.scaler.scale) == (False, 1, 2.0**39)
    for name, value in session.parameters().items():
        np.testing.assert_array_equal(value, before[name])
    assert mixed.reports() == [("loss_scale", 2.0**39), ("skipped_steps", 1.0)]
    mixed.scaler.scale = 2.0**10
    mixed.step(x, y, 0.1, step=1)
    assert mixed.applied and mixed.reports() == [("loss_scale", 2.0**10)]
    assert any(not np.array_equal(v, before[n]) for n, v in session.parameters().items())
    assert not any(name.endswith("/half") for name in session.optimizer_state())


def test_the_summary_counts_skipped_steps_and_the_last_loss_scale():
    log = EventLog()
    for step, scale in enumerate((65536.0, 32768.0, 32768.0)):
        log.scalar("loss_scale", step, scale, 0.0)
    log.scalar("skipped_steps", 1, 1, 0.0)
    assert precision_summary("mixed-bf16", log) == {
        "precision": {
            "mode": "mixed-bf16",
            "compute_dtype": "bfloat16",
            "skipped_steps": 1,
            "loss_scale": 32768.0,
        }
    }
    assert precision_summary("fp32", log) == {}


def test_a_device_holds_16_bit_copies_but_never_hands_them_back():
    config = RunConfig(precision="mixed-fp16", hidden=(6,))
    spec = WorkerSpec("run", config.to_dict(), 0, 1, ("a",), ("cpu:0",), 0.0, 1, model=MODEL)
    state = initial_state(spec, Momentum(), DeviceArrays.for_kind("cpu"))
    for name in MODEL.parameter_shapes():
        assert state[name].dtype == np.float32
        assert state[compute_copy_name(name)].dtype == np.float16
    snapshot = host_snapshot(DeviceArrays.for_kind("cpu"), state, MODEL.parameter_shapes())
    assert set(snapshot["parameters"]) == set(MODEL.parameter_shapes())
    assert not any(name.endswith("/half") for name in snapshot["optimizer_state"])


@pytest.mark.parametrize(
    "flags, says",
    [
        ({"dtype": "float64"}, "needs --dtype float32, not float64"),
        ({"strategy": "pipeline", "devices": 2}, "strategy pipeline does not take it"),
        ({"strategy": "parameter-server", "devices": 2}, "applies to one-device, mirrored"),
        ({"strategy": "mirrored", "devices": 2, "replication": "in-graph"}, "between-graph"),
    ],
)
def test_contradictions_are_refused_naming_precision(flags, says):
    with pytest.raises(ConfigError) as refused:
        validate_config(RunConfig(precision="mixed-bf16", **flags))
    assert refused.value.field == "--precision" and says in str(refused.value)


def test_simulated_overflows_are_accepted_with_mixed_precision():
    config = validate_config(RunConfig(precision="mixed-fp16", simulate_overflow=(3,)))
    assert config.simulate_overflow == (3,)


def test_the_cupy_double_refuses_bfloat16_as_cupy_13_and_takes_it_as_cupy_14(monkeypatch):
    bfloat16 = np.ones((2, 2), dtype="bfloat16")
    assert fake_cupy.asarray(bfloat16).dtype.name == "bfloat16"
    assert bfloat16_obstacle(fake_cupy) is None
    monkeypatch.setenv("DTRAIN_FAKE_CUPY_BFLOAT16", "0")
    with pytest.raises(ValueError, match="Unsupported dtype bfloat16"):
        fake_cupy.asarray(bfloat16)
    assert fake_cupy.asarray(bfloat16.astype(np.float16)).dtype == np.float16
    assert "cannot compute in bfloat16" in bfloat16_obstacle(fake_cupy)


def test_a_gpu_without_bfloat16_reports_it_and_mixed_bf16_is_refused_there(cpu_double_gpus):
    config = RunConfig(precision="mixed-bf16")
    assert describe_device()["bfloat16"] is None
    check_precision_on_device(config, "gpu")  # CuPy 14's double: taken
    cpu_double_gpus.setenv("DTRAIN_FAKE_CUPY_BFLOAT16", "0")
    assert "Unsupported dtype bfloat16" in describe_device()["bfloat16"]
    check_precision_on_device(config, "cpu")  # NumPy has it through ml_dtypes
    check_precision_on_device(RunConfig(precision="mixed-fp16"), "gpu")
    with pytest.raises(ConfigError) as refused:
        check_precision_on_device(config, "gpu")
    assert refused.value.field == "--precision" and "use --precision mixed-fp16" in str(
        refused.value
    )
