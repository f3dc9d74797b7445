"""The cost models with literal calibrations: measured times answer, a missing signature is
scaled from its op kind's measured rate, links come from fitted transfers."""

import pytest

from workbench.costs import (
    CalibratedCostModel,
    Calibration,
    LinkFit,
    StaticCostModel,
    fit_link,
    link_key,
    op_signature,
)
from workbench.ir import GraphBuilder, ops


def _matmul_graph(rows: int):
    builder = GraphBuilder()
    x = builder.placeholder("x", (rows, 8), "float32")
    w = builder.placeholder("w", (8, 4), "float32")
    graph = builder.build({"y": ops.relu(ops.matmul(x, w))})
    matmul, relu = graph.nodes[-2], graph.nodes[-1]
    return graph, matmul, relu


def test_a_measured_signature_costs_what_was_measured_on_that_device():
    graph, matmul, _ = _matmul_graph(16)
    calibration = Calibration(
        "sig", ("a", "b"), {"a": {op_signature(graph, matmul): 2e-3}, "b": {}}
    )
    model = CalibratedCostModel(calibration)
    assert model.node_seconds(graph, matmul, "a") == 2e-3
    # Device b measured nothing: the same signature on another device of the cluster stands in.
    assert model.node_seconds(graph, matmul, "b") == 2e-3


def test_an_unmeasured_shape_is_scaled_by_its_op_kinds_measured_rate():
    small, small_matmul, _ = _matmul_graph(16)  # 2*16*8*4 = 1024 FLOPs
    large, large_matmul, _ = _matmul_graph(64)  # 4096 FLOPs
    calibration = Calibration("sig", ("a",), {"a": {op_signature(small, small_matmul): 1e-3}})
    assert CalibratedCostModel(calibration).node_seconds(large, large_matmul, "a") == (
        pytest.approx(4e-3)
    )


def test_an_op_kind_never_measured_falls_back_to_the_fixed_rates():
    graph, _, relu = _matmul_graph(16)
    model = CalibratedCostModel(Calibration("sig", ("a",)))
    assert model.node_seconds(graph, relu, "a") == StaticCostModel().node_seconds(graph, relu, "a")


def test_transfers_use_the_fitted_link_and_cost_nothing_on_one_device():
    calibration = Calibration("sig", ("a", "b"), links={link_key("a", "b"): LinkFit(1e-4, 1e9)})
    model = CalibratedCostModel(calibration)
    assert model.transfer_seconds(1_000_000, "a", "b") == pytest.approx(1.1e-3)
    assert model.transfer_seconds(1_000_000, "a", "a") == 0.0
    # A pair that was not measured: the fixed rates.
    assert model.transfer_seconds(1_000, "b", "a") == StaticCostModel().transfer_seconds(
        1_000, "b", "a"
    )


@pytest.mark.parametrize(
    ("samples", "latency", "bandwidth"),
    [
        ([(0, 1e-4), (1_000_000, 1.1e-3)], 1e-4, 1e9),
        ([(1_000, 5e-5), (1_000_000, 1e-3), (4_000_000, 4e-3)], 3.2e-5, 1e9),
    ],
)
def test_fit_link_recovers_latency_and_bandwidth(samples, latency, bandwidth):
    fit = fit_link(samples)
    assert fit.latency == pytest.approx(latency, abs=2e-5)
    assert fit.bandwidth == pytest.approx(bandwidth, rel=0.05)


def test_fit_link_needs_two_sizes():
    with pytest.raises(ValueError, match="two sizes"):
        fit_link([(10, 1.0), (10, 2.0)])


def test_a_calibration_merges_newer_measurements_and_round_trips_through_json():
    old = Calibration(
        "sig", ("a",), {"a": {"x": 1.0, "y": 2.0}}, dispatch_seconds=0.5, measured_seconds=1.0
    )
    new = Calibration("sig", ("a",), {"a": {"y": 3.0, "z": 4.0}}, measured_seconds=0.25)
    merged = old.merged(new)
    assert merged.op_seconds == {"a": {"x": 1.0, "y": 3.0, "z": 4.0}}
    assert merged.dispatch_seconds == 0.5  # the newer one measured none
    assert merged.measured_seconds == 1.25
    assert merged.missing_signatures("a", ["x", "w"]) == ["w"]
    assert Calibration.from_json(merged.to_json()) == merged
