"""The intermediate representation: a dataflow graph, its op catalogue, autodiff, interpreter.

What flows in: model code calling :class:`GraphBuilder` methods and :mod:`workbench.ir.ops`
functions. What flows out: an immutable :class:`Graph` (nodes in topological order, each with
static output types) that passes rewrite and strategies place, partition and run.

Invariants: every node's inputs are defined earlier in ``Graph.nodes``; every node's ``types``
agree with its op's shape rule; update ops (``assign``, ``apply_*``) are the only ops that write
variables, and they do so in place in a device's variable store.
"""

from workbench.ir import ops
from workbench.ir.autodiff import DifferentiationError, gradients
from workbench.ir.builder import GraphBuilder, GraphBuildError, Tensor
from workbench.ir.graph import Graph, Node, TensorType, Value
from workbench.ir.interpreter import Executable, ExecutionError, evaluate
from workbench.ir.rules import OPS, ShapeError

__all__ = [
    "OPS",
    "DifferentiationError",
    "Executable",
    "ExecutionError",
    "Graph",
    "GraphBuildError",
    "GraphBuilder",
    "Node",
    "ShapeError",
    "Tensor",
    "TensorType",
    "Value",
    "evaluate",
    "gradients",
    "ops",
]
