"""Every op's rules agree with one another: on every example in the op zoo, forward and
backward, what each node computes has the shape and dtype its shape rule declared, and what
its fold rule computes from the same inputs is what it computes. Every differentiable op has
an example (its vjp rule is checked by finite differences)."""

import numpy as np
import pytest

from tests.ir.op_zoo import CASES, fixed_feeds
from workbench.ir import Executable, GraphBuilder, gradients, ops
from workbench.ir.graph import Node
from workbench.ir.rules import (
    NOT_DIFFERENTIABLE,
    OPS,
    VJP_RULES,
    fold_with_numpy,
)

SOURCES = {"placeholder", "constant", "variable"}


def run_every_node(case) -> tuple[list[Node], dict[str, tuple]]:
    """The case's graph with the gradients of a projection of its output, and what each of
    its nodes computed (a tuple of outputs per node name)."""
    rng = np.random.default_rng(0)
    builder = GraphBuilder()
    inputs = [builder.placeholder(f"in{i}", s, "float64") for i, s in enumerate(case.float_inputs)]
    output = case.build(builder, *inputs)
    weights = builder.placeholder("weights", output.shape, "float64")
    loss = ops.reduce_sum(output * weights)
    grads = gradients(builder, loss, inputs)
    graph = builder.build({"loss": loss, **{f"grad{i}": g for i, g in enumerate(grads)}})
    feeds = {**fixed_feeds(case), "weights": rng.normal(size=output.shape)}
    for i, shape in enumerate(case.float_inputs):
        drawn = rng.uniform(0.5, 2.0, shape) if case.positive else rng.normal(size=shape)
        feeds[f"in{i}"] = drawn
    computed: dict[str, tuple] = {}
    for node in graph.nodes:
        if node.op == "placeholder" and node.name in feeds:
            computed[node.name] = (feeds[node.name],)
        elif node.op == "constant":
            computed[node.name] = (node.attrs["value"],)

    def record(node: Node, result) -> None:
        computed[node.name] = result if len(node.types) != 1 else (result,)

    Executable(graph).run(feeds, on_node=record)
    return list(graph.nodes), computed


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id or case.op)
def test_each_nodes_shape_rule_and_fold_rule_agree_with_what_it_computes(case):
    nodes, computed = run_every_node(case)
    checked = set()
    for node in nodes:
        if node.name not in computed:
            continue
        results = computed[node.name]
        declared = [(t.shape, t.dtype) for t in node.types]
        got = [(tuple(np.shape(r)), str(np.asarray(r).dtype)) for r in results]
        assert got == declared, f"{node.name} ({node.op}): computed {got}, declared {declared}"
        if node.op in ("placeholder", "constant", "variable") or OPS[node.op].effectful:
            checked.add(node.op)  # its shape rule is checked; an effect is never folded
            continue
        arrays = [np.asarray(computed[v.node][v.index]) for v in node.inputs]
        folded = fold_with_numpy(node.op, arrays, dict(node.attrs))
        if OPS[node.op].stateful:
            assert folded is None, f"{node.op} reads the variable store but folds"
            continue
        if folded is None:
            continue
        assert len(folded) == len(results), node.name
        for want, have in zip(results, folded):
            np.testing.assert_allclose(have, want, rtol=1e-12, err_msg=f"fold of {node.name}")
        checked.add(node.op)
    assert case.op in checked, f"{case.op}: no node of it was checked"


def test_every_differentiable_op_has_a_finite_difference_case():
    differentiable = {op for op in OPS if VJP_RULES[op] is not NOT_DIFFERENTIABLE} - SOURCES
    covered = {case.op for case in CASES}
    assert not differentiable - covered, f"untested vjp rules: {sorted(differentiable - covered)}"


def test_non_differentiable_ops_are_the_expected_ones():
    marked = {op for op in OPS if VJP_RULES[op] is NOT_DIFFERENTIABLE}
    assert marked == {
        "greater",
        "greater_equal",
        "equal",
        "argmax",
        "one_hot",
        "assign",
        "apply_sgd",
        "apply_momentum",
        "apply_adam",
        "send",
        "recv",
    }
