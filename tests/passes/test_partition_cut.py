"""Partitioning is collect-then-emit: ``collect`` describes the cut as immutable data and
builds no node; ``emit`` builds the partitions from that description alone."""

import operator

import numpy as np
import pytest

from workbench.ir import GraphBuilder, ops
from workbench.passes import partition, place
from workbench.passes.partition import Copy, Keep, Receive, SendOut, Token, collect, emit

DEVICES = ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]


def _placed():
    """``y`` made on task 0 and read twice on task 1; an update on task 1 waits on ``y``."""
    b = GraphBuilder()
    with b.device("/task:0"):
        x = b.placeholder("x", (2,), "float64")
        y = ops.exp(x)
    with b.device("/task:1"):
        z = ops.tanh(y) + y + x
        w = b.variable("w", (2,), "float64")
        b.emit(
            "apply_sgd",
            [w, b.constant(np.ones(2)), b.constant(0.5)],
            var="w",
            control_inputs=[y.name],
        )
    return place(b.build({"z": z}), DEVICES), x, y


def test_collect_lists_each_crossing_once_in_send_order_and_builds_no_node():
    graph, x, y = _placed()
    cut = collect(graph, DEVICES)

    keys = [(crossing.key, crossing.token) for crossing in cut.crossings]
    assert keys == [
        (f"{x.name}->{DEVICES[1]}", False),
        (f"{y.name}->{DEVICES[1]}", False),
        (f"token/{y.name}->{DEVICES[1]}", True),
    ]
    # Task 0 sends right after the maker, the token after its constant.
    sender = [type(entry).__name__ for entry in cut.entries[DEVICES[0]]]
    assert sender == ["Keep", "SendOut", "Keep", "SendOut", "Token", "SendOut"]
    # Task 1 receives each value once, right before its first reader.
    receives = [e.crossing.key for e in cut.entries[DEVICES[1]] if isinstance(e, Receive)]
    assert receives == [f"{y.name}->{DEVICES[1]}", f"{x.name}->{DEVICES[1]}", keys[2][0]]
    # The kept nodes are the graph's own: rewiring them is left to emit.
    kept = [e.node for entries in cut.entries.values() for e in entries if isinstance(e, Keep)]
    assert len(kept) == len(graph.nodes)
    assert all(any(node is original for original in graph.nodes) for node in kept)
    with pytest.raises(TypeError):
        operator.setitem(cut.entries, DEVICES[0], ())


def test_a_placeholder_fed_everywhere_is_copied_where_it_is_read_not_sent():
    graph, x, _ = _placed()
    cut = collect(graph, DEVICES, fed_everywhere=[x.name])
    assert all(crossing.value.node != x.name for crossing in cut.crossings)
    copies = [e.node.name for e in cut.entries[DEVICES[1]] if isinstance(e, Copy)]
    assert copies == [x.name]


def test_emit_builds_from_the_description_what_partition_returns():
    graph, x, _ = _placed()
    for fed in ((), (x.name,)):
        cut = collect(graph, DEVICES, fed)
        emitted, direct = emit(cut), partition(graph, DEVICES, fed)
        assert emitted.describe() == direct.describe()
        for device in DEVICES:
            built = emitted.partitions[device].nodes
            assert [node.name for node in built] == [
                node.name for node in direct.partitions[device].nodes
            ]
            # One node per entry, in the entries' order.
            assert len(built) == len(cut.entries[device])
            for entry, node in zip(cut.entries[device], built, strict=True):
                if isinstance(entry, SendOut):
                    assert node.op == "send" and node.attrs["key"] == entry.crossing.key
                if isinstance(entry, Token):
                    assert node.name == f"token/{entry.node}" and node.op == "constant"
