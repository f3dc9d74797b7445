"""The graph rewrite ZeRO stage 3 runs on: every parameter read where it is needed, once for
forward and once for backward.

The training graph reads each variable once, at its top, and forward and backward share that
value, so a gathered parameter would stay live from the first layer's forward to its own
layer's backward. Here each variable's read moves to just before its first forward reader,
and the backward readers get a read of their own just before the first of them, tagged
``var=<name>#backward`` so the store serving the reads knows which pass asks. The
interpreter drops each read after its last reader
(:mod:`workbench.ir.interpreter`), so a gathered parameter lives from its read to its last
use in that pass.
"""

from __future__ import annotations

from collections.abc import Iterable

from workbench.ir.graph import Graph, Node, Value

BACKWARD = "#backward"
# The autodiff pass builds backward under this scope (workbench/ir/autodiff.py).
_BACKWARD_SCOPE = "gradients/"


def is_backward(node: Node) -> bool:
    return node.name.startswith(_BACKWARD_SCOPE)


def gathered_reads(graph: Graph) -> Graph:
    """``graph`` with each ``variable`` node moved to just before its first forward reader,
    and a second read (``var`` tagged :data:`BACKWARD`) before its first backward reader,
    which the backward readers then read instead.

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (2,), "float64")
    >>> w = b.variable("w", (2,), "float64")
    >>> y = x * w
    >>> with b.scope("gradients"):
    ...     g = ops.exp(w)
    >>> rewritten = gathered_reads(b.build({"y": y, "g": g}))
    >>> [(n.name, n.attrs.get("var")) for n in rewritten.nodes if n.op == "variable"]
    [('w', 'w'), ('w/backward_read', 'w#backward')]
    """
    variables = {node.name: node for node in graph.nodes if node.op == "variable"}
    readers: dict[str, list[Node]] = {name: [] for name in variables}
    for node in graph.nodes:
        for source in dict.fromkeys(value.node for value in node.inputs):
            if source in variables:
                readers[source].append(node)
    before: dict[str, list[Node]] = {}  # reader name -> reads to place just before it
    renamed: dict[str, dict[Value, Value]] = {}  # backward reader -> its inputs' new reads
    for name, variable in variables.items():
        forward = [node for node in readers[name] if not is_backward(node)]
        backward = [node for node in readers[name] if is_backward(node)]
        if forward:
            before.setdefault(forward[0].name, []).append(variable)
        if backward:
            read = variable.replace(
                name=f"{name}/backward_read",
                attrs={**variable.attrs, "var": variable.attrs["var"] + BACKWARD},
            )
            before.setdefault(backward[0].name, []).append(read)
            for node in backward:
                renamed.setdefault(node.name, {})[variable.output()] = read.output()
    nodes: list[Node] = []
    for node in graph.nodes:
        if node.op == "variable" and readers[node.name]:
            continue  # placed before its readers
        nodes.extend(before.get(node.name, ()))
        nodes.append(_rewired(node, renamed.get(node.name, {})))
    return Graph(tuple(nodes), dict(graph.outputs))


def _rewired(node: Node, renamed: dict[Value, Value]) -> Node:
    if not renamed:
        return node
    return node.replace(inputs=tuple(renamed.get(value, value) for value in node.inputs))


def reads_per_pass(graph: Graph) -> dict[tuple[str, bool], int]:
    """How many reads of each ``var`` (without its tag) each pass makes: ``{(var,
    backward): count}``."""
    counts: dict[tuple[str, bool], int] = {}
    for node in _variables(graph.nodes):
        var = node.attrs["var"]
        key = (var.removesuffix(BACKWARD), var.endswith(BACKWARD))
        counts[key] = counts.get(key, 0) + 1
    return counts


def _variables(nodes: Iterable[Node]) -> Iterable[Node]:
    return (node for node in nodes if node.op == "variable")
