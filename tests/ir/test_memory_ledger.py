"""A run counted in a memory ledger holds each value from when it appears until the interpreter
drops it, by buffer: views and variables the device holds add nothing, freed values are gone."""

import numpy as np
import pytest

from workbench.ir import Executable, ExecutionError, GraphBuilder, ops
from workbench.ir.memory import MemoryLedger

BLOCK = 4 * 8 * 8  # bytes of a (4, 8) float64 array


def small_graph():
    """x (4, 8) -> exp -> reshape (8, 4) -> * 2 -> sum: one fed, two computed blocks, a view,
    a scalar constant and a scalar result."""
    b = GraphBuilder()
    x = b.placeholder("x", (4, 8), "float64")
    doubled = ops.reshape(ops.exp(x), (8, 4)) * 2.0
    return b.build({"total": ops.reduce_sum(doubled)})


def test_peak_of_a_small_graph_is_the_bytes_counted_by_hand():
    ledger = MemoryLedger()
    out = Executable(small_graph()).run({"x": np.zeros((4, 8))}, ledger=ledger)
    assert float(out["total"]) == 64.0
    # By hand: x and the constant 2.0 are live from the start (BLOCK + 8); exp adds a block
    # (x then goes); the reshape views exp's block; the product adds a block while the
    # reshaped view and the constant are still read: BLOCK + 8 + BLOCK is the most at once.
    # Counting the view, or keeping x, would add a third block.
    peak = ledger.peak()
    assert peak.total == 2 * BLOCK + 8
    assert peak.at_peak == {**dict.fromkeys(peak.at_peak, 0), "activations": 2 * BLOCK + 8}
    assert ledger.current_total == 0  # the fetched scalar goes with the run


def test_fetched_gradients_are_counted_apart_and_variables_held_by_the_device_are_not_twice():
    b = GraphBuilder()
    w = b.variable("w", (4, 8), "float64")
    x = b.placeholder("x", (4, 8), "float64")
    b_graph = b.build({"grad/w": ops.exp(x) * w, "loss": ops.reduce_sum(w)})
    state = {"w": np.ones((4, 8))}
    ledger = MemoryLedger()
    ledger.hold_array("parameters", state["w"])
    Executable(b_graph).run({"x": np.zeros((4, 8))}, state, ledger=ledger)
    peak = ledger.peak()
    assert peak.by_category["parameters"] == BLOCK
    assert peak.by_category["gradients"] == BLOCK
    # x and exp(x) at once, and nothing more for reading w.
    assert peak.by_category["activations"] == 2 * BLOCK
    assert ledger.current() == {**ledger.current(), "parameters": BLOCK, "gradients": 0}


def test_without_keeping_fetches_each_goes_to_on_fetch_and_is_dropped_after_its_last_reader():
    b = GraphBuilder()
    x = b.placeholder("x", (4, 8), "float64")
    first = ops.exp(x)
    second = first * 3.0
    graph = b.build(
        {"grad/first": first, "grad/second": second, "loss": ops.reduce_sum(second + 1.0)}
    )
    seen: dict[str, float] = {}

    def on_fetch(key, value):
        seen[key] = float(value.sum())

    ledger = MemoryLedger()
    kept = Executable(graph).run({"x": np.zeros((4, 8))}, on_fetch=on_fetch, ledger=ledger)
    assert kept["grad/first"].shape == (4, 8)
    kept_peak = ledger.peak()
    ledger = MemoryLedger()
    out = Executable(graph).run(
        {"x": np.zeros((4, 8))}, on_fetch=on_fetch, ledger=ledger, keep_fetches=False
    )
    assert out == {}
    assert seen == {"grad/first": 32.0, "grad/second": 96.0, "loss": 128.0}
    # Kept: first and second stay, so the add's result joins them (plus the constant 1.0).
    assert kept_peak.total == 3 * BLOCK + 8
    assert kept_peak.at_peak["gradients"] == 2 * BLOCK
    # Dropped: first goes after the multiply (its last reader), so at most two blocks are
    # live at once (x and exp(x), or first and second), beside both constants at the start.
    assert ledger.peak().total == 2 * BLOCK + 16
    assert ledger.current_total == 0


def test_a_run_that_drops_its_fetches_needs_on_fetch():
    with pytest.raises(ValueError, match="on_fetch"):
        Executable(small_graph()).run({"x": np.zeros((4, 8))}, keep_fetches=False)


def test_a_failed_run_leaves_nothing_held():
    b = GraphBuilder()
    w = b.variable("w", (4, 8), "float64")
    graph = b.build({"y": ops.exp(b.placeholder("x", (4, 8), "float64")) * w})
    ledger = MemoryLedger()
    with pytest.raises(ExecutionError, match="failed"):
        Executable(graph).run({"x": np.zeros((4, 8))}, {}, ledger=ledger)
    assert ledger.current_total == 0
