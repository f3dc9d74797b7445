"""The elementwise ops are table rows: each row's op has a builder of its name in
``workbench.ir.ops`` that emits it, and the rows are the rules the interpreter runs."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.ir import GraphBuilder, evaluate, ops
from workbench.ir.ops.elementwise import ARITHMETIC, COMPARISONS, UNARY

BINARY = [*ARITHMETIC, *COMPARISONS]


@pytest.mark.parametrize("op", [*BINARY, *UNARY])
def test_each_row_has_a_builder_of_its_name_that_emits_it(op):
    b = GraphBuilder()
    x = b.placeholder("x", (2,), "float64")
    builder = getattr(ops, op)
    out = builder(x, 1.0) if op in BINARY else builder(x)
    graph = b.build({"y": out})
    assert builder.__name__ == op
    assert graph.nodes[-1].op == op


def test_a_row_is_what_the_interpreter_runs():
    b = GraphBuilder()
    x = b.placeholder("x", (3,), "float64")
    graph = b.build({"d": ops.div(x, 2.0), "m": ops.maximum(x, 0.0), "s": ops.sqrt(x)})
    values = np.array([1.0, 4.0, 9.0])
    result = evaluate(graph, {"x": values})
    assert result["d"] == pytest.approx(values / 2)
    assert result["m"] == pytest.approx(values)
    assert result["s"] == pytest.approx(np.sqrt(values))


def test_builders_keep_their_documentation():
    assert "GELU" in (ops.gelu.__doc__ or "")
    assert "relu" in (ops.relu_grad.__doc__ or "")
