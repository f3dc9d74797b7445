"""Predicted peak memory: a graph's static peak is what the interpreter measures, byte for
byte, and each strategy's terms move the way their designs say (a 1F1B stage holds fewer
micro-batches than a GPipe one, ZeRO stage 3 keeps a shard, accumulation shrinks the
activations); every what-if row gives each device's peak with its split."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.config import RunConfig
from workbench.ir import Executable, Graph
from workbench.ir.liveness import graph_peak
from workbench.ir.memory import CATEGORIES, MemoryLedger
from workbench.launch.runner import run_training
from workbench.models import build_model
from workbench.optim import init_slots, make_optimizer
from workbench.planner.device_costs import described_costs
from workbench.planner.memory import DeviceMemory, predict_memory
from workbench.planner.what_if import what_if
from workbench.simulate import parse_cluster
from workbench.strategies import STRATEGIES, validate_config
from workbench.training.graphs import build_training_graph

MODEL = build_model("mlp", (64,), 10, (32, 16))
CLUSTER = parse_cluster("dgx-h100,hosts=1,gpus-per-host=4")
COSTS = described_costs(CLUSTER)
PARAMETER_BYTES = sum(int(np.prod(shape)) for shape in MODEL.parameter_shapes().values()) * 8


def _measured(graph: Graph, optimizer, keep_fetches: bool) -> tuple[int, dict[str, int]]:
    """A run of ``graph`` with a ledger holding the device's state first, as a device does:
    the step's high-water above that state, and its split."""
    parameters = MODEL.init_parameters(0, "float64")
    slots = init_slots(optimizer, parameters) if optimizer else {}
    state = {**parameters, **slots}
    ledger = MemoryLedger()
    for name, value in state.items():
        ledger.hold_array("parameters" if name in parameters else "optimizer", value)
    resident = ledger.current()
    ledger.start_window()
    rng = np.random.default_rng(0)
    feeds = {
        "inputs": rng.standard_normal((8, 64)),
        "labels": rng.integers(0, 10, 8),
        "learning_rate": np.float64(0.1),  # the devices feed NumPy scalars
    }
    names = {node.name for node in graph.nodes if node.op == "placeholder"}
    Executable(graph).run(
        {k: v for k, v in feeds.items() if k in names},
        state,
        ledger=ledger,
        keep_fetches=keep_fetches,
        on_fetch=lambda key, value: None,
    )
    peak = ledger.peak()
    return peak.total - sum(resident.values()), {
        c: peak.at_peak[c] - resident[c] for c in CATEGORIES
    }


@pytest.mark.parametrize(
    ("optimizer", "keep_fetches"),
    [("momentum", True), ("adam", True), (None, True), (None, False)],
)
def test_the_static_peak_of_the_training_graph_is_the_measured_one(optimizer, keep_fetches):
    chosen = make_optimizer(optimizer) if optimizer else None
    graph = build_training_graph(MODEL, chosen, 8, "float64").graph
    static = graph_peak(graph, keep_fetches=keep_fetches)
    total, split = _measured(graph, chosen, keep_fetches)
    assert static.total == total > 0
    assert static.at_peak == split


def _predict(**options) -> dict[str, DeviceMemory]:
    config = RunConfig(hidden=(32, 16), batch_size=64, dtype="float64", **options)
    config = validate_config(config)
    devices = STRATEGIES[config.strategy].device_names(config, "cpu")
    return predict_memory(config, MODEL, make_optimizer(config.optimizer), devices, COSTS)


def _each(peaks: dict[str, DeviceMemory], *categories: str) -> set[int]:
    return {sum(peak.by_category[c] for c in categories) for peak in peaks.values()}


def test_a_gpipe_stage_holds_more_activations_than_a_1f1b_stage_at_eight_microbatches():
    gpipe = _predict(strategy="pipeline", devices=2, microbatches=8, schedule="gpipe")
    one_f_one_b = _predict(strategy="pipeline", devices=2, microbatches=8, schedule="1f1b")
    first = next(iter(gpipe))  # stage 0: GPipe stashes 8 micro-batches, 1F1B at most 2
    assert gpipe[first].by_category["activations"] > one_f_one_b[first].by_category["activations"]
    assert gpipe[first].total > one_f_one_b[first].total


@pytest.mark.parametrize(("optimizer", "slots"), [("sgd", 0), ("momentum", 1)])
def test_mirrored_replicas_keep_the_whole_model_and_its_slots(optimizer, slots):
    peaks = _predict(strategy="mirrored", devices=4, optimizer=optimizer)
    assert _each(peaks, "parameters", "optimizer") == {PARAMETER_BYTES * (1 + slots)}


def test_zero_stage_3_shards_the_model_state_four_ways():
    mirrored = _predict(strategy="mirrored", devices=4)
    stages = {z: _predict(strategy="sharded", devices=4, zero_stage=z) for z in (1, 2, 3)}
    (whole,) = _each(mirrored, "parameters", "optimizer")
    assert whole == 2 * PARAMETER_BYTES  # momentum: one slot
    # The four ranks' shards add up to the whole state, each a quarter of it (to an element
    # of each bucket).
    shards = _each(stages[3], "parameters", "optimizer")
    state = [
        peak.by_category["parameters"] + peak.by_category["optimizer"]
        for peak in stages[3].values()
    ]
    assert sum(state) == whole and max(shards) - min(shards) <= 2 * 8
    # Stage 1 shards the optimizer state alone.
    assert _each(stages[1], "parameters") == {PARAMETER_BYTES}
    assert sum(peak.by_category["optimizer"] for peak in stages[1].values()) == PARAMETER_BYTES
    # Each stage keeps less than the one before it at its peak, all less than mirrored.
    totals = [max(peak.total for peak in stages[z].values()) for z in (1, 2, 3)]
    assert totals == sorted(totals, reverse=True)
    assert totals[0] < max(peak.total for peak in mirrored.values())


def test_accumulation_lowers_the_activations_and_holds_a_buffer():
    plain = _predict(strategy="mirrored", devices=2)
    accumulated = _predict(strategy="mirrored", devices=2, accumulate=4)
    assert max(_each(accumulated, "activations")) < min(_each(plain, "activations"))
    # The accumulation buffer beside the micro-step's gradients.
    assert min(_each(accumulated, "gradients")) >= 2 * PARAMETER_BYTES


def test_every_what_if_row_gives_each_device_its_peak_split_by_category():
    rows = what_if(
        RunConfig(hidden=(32, 16), batch_size=64),
        MODEL,
        make_optimizer("momentum"),
        COSTS,
        CLUSTER.size,
        CLUSTER.devices,
    )
    predicted = [row for row in rows if row.prediction is not None]
    assert {row.strategy for row in predicted} >= {"mirrored", "hybrid", "parameter-server"}
    for row in predicted:
        memory = row.prediction.memory_bytes
        assert set(memory) == set(row.prediction.devices)
        for peak in memory.values():
            assert set(peak.by_category) == set(CATEGORIES)
            assert sum(peak.by_category.values()) == peak.total
        data = row.to_dict()
        assert data["memory_per_device"] == max(peak.total for peak in memory.values())
        assert memory[data["memory_device"]].total == data["memory_per_device"]


def test_the_table_predicts_every_row_under_the_runs_own_options():
    def mirrored_activations(**options) -> int:
        rows = what_if(
            RunConfig(hidden=(32, 16), batch_size=64, **options),
            MODEL,
            make_optimizer("momentum"),
            COSTS,
            2,
            CLUSTER.devices,
        )
        (row,) = [
            r
            for r in rows
            if r.strategy == "mirrored"
            and r.options["allreduce"] == "ring"
            and r.options["compression"] == "none"
        ]
        assert row.prediction.config.accumulate == options.get("accumulate", 1)
        return row.to_dict()["memory_by_category"]["activations"]

    assert mirrored_activations(accumulate=4) < mirrored_activations()


def _predicted_and_measured(**flags) -> list[tuple[DeviceMemory, dict]]:
    """Each device's predicted peak beside its measured one, on a run whose peak falls after
    backward (a batch of 8 rows, small beside the model's gradients)."""
    settings = {"steps": 2, "batch_size": 8, "hidden": (128,), "lr_decay": "none"}
    config = RunConfig(**{**settings, **flags})
    result = run_training(config, progress=lambda _: None)
    measured = result.summary["memory"]
    return [(peak, measured[device]) for device, peak in result.prediction.memory_bytes.items()]


@pytest.mark.integration
@pytest.mark.parametrize(
    "flags",
    [{"strategy": "multi-worker-mirrored"}, {"strategy": "mirrored", "allreduce": "reduce-to-one"}],
)
def test_an_all_reduce_into_a_buffer_of_its_own_holds_it_beside_the_packed_bucket(flags):
    for predicted, measured in _predicted_and_measured(devices=2, **flags):
        assert predicted.total == measured["peak_bytes"]
        assert predicted.by_category == measured["at_peak"]
        # The packed bucket and the sum the hierarchical all-reduce (or reduce-to-one) returns.
        assert measured["at_peak"]["communication"] == 2 * measured["at_peak"]["gradients"]


@pytest.mark.integration
def test_a_parameter_server_worker_peaks_holding_its_gradients_beside_the_pulled_variables():
    pairs = _predicted_and_measured(strategy="parameter-server", devices=2, ps=1)
    for predicted, measured in pairs[:2]:  # the workers
        held = {c: n for c, n in measured["at_peak"].items() if c != "communication"}
        assert {c: n for c, n in predicted.by_category.items() if c != "communication"} == held
        assert held["gradients"] == predicted.by_category["communication"] > 0
        # The pulled payload is an array viewing the message it arrived in, whose header the
        # device holds too.
        pulled = measured["at_peak"]["communication"] - predicted.by_category["communication"]
        assert 0 <= pulled < 1024
    shard, measured = pairs[2]
    assert shard.total == measured["peak_bytes"]


@pytest.mark.integration
def test_a_shard_counting_a_sample_of_its_updates_still_reports_its_predicted_peak():
    # 2 async workers x 11 steps: 22 updates, so the shard counts its first and its 21st.
    flags = {"strategy": "parameter-server", "devices": 2, "ps": 1, "mode": "async"}
    shard, measured = _predicted_and_measured(steps=11, **flags)[2]
    assert shard.total == measured["peak_bytes"]
    assert shard.by_category == measured["at_peak"]
