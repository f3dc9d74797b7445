"""The graph verifier run between passes: a pass that breaks an invariant is caught at once."""

from __future__ import annotations

from workbench.ir.graph import Graph
from workbench.ir.rules import OPS, SHAPE_RULES


class GraphVerificationError(ValueError):
    """A graph breaks an IR invariant; the message names the node and, if known, the pass."""


def verify(graph: Graph, after: str = "") -> None:
    """Check names are unique, inputs come earlier, types match the shape rules, outputs exist."""
    where = f" (after pass {after!r})" if after else ""
    seen: dict[str, tuple] = {}
    for node in graph.nodes:
        if node.name in seen:
            raise GraphVerificationError(f"node {node.name!r} appears twice{where}")
        if node.op not in OPS:
            raise GraphVerificationError(f"node {node.name!r} has unknown op {node.op!r}{where}")
        for value in node.inputs:
            if value.node not in seen:
                raise GraphVerificationError(
                    f"node {node.name!r} reads {value} before it is defined{where}"
                )
            if value.index >= len(seen[value.node]):
                raise GraphVerificationError(
                    f"node {node.name!r} reads output {value.index} of {value.node!r}, "
                    f"which has {len(seen[value.node])}{where}"
                )
        for name in node.control_inputs:
            if name not in seen:
                raise GraphVerificationError(
                    f"node {node.name!r} waits on {name!r}, which is not defined before it{where}"
                )
        input_types = tuple(seen[value.node][value.index] for value in node.inputs)
        expected = SHAPE_RULES[node.op](input_types, **node.attrs)
        if tuple(expected) != tuple(node.types):
            shown = ", ".join(str(t) for t in node.types)
            wanted = ", ".join(str(t) for t in expected)
            raise GraphVerificationError(
                f"node {node.name!r} ({node.op}) declares {shown} "
                f"but its inputs give {wanted}{where}"
            )
        seen[node.name] = node.types
    for key, value in graph.outputs.items():
        if value.node not in seen or value.index >= len(seen[value.node]):
            raise GraphVerificationError(f"output {key!r} names missing value {value}{where}")
