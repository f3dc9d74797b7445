"""Running passes in a named order with the verifier between them.

Like TF's graph optimizer, the sequence is repeated until a round changes nothing (folding can
expose new common subexpressions and vice versa), bounded by ``max_rounds``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from workbench.ir.graph import Graph
from workbench.passes.common_subexpressions import eliminate_common_subexpressions
from workbench.passes.fold_constants import fold_constants
from workbench.passes.prune import prune
from workbench.passes.rewrite import hashable
from workbench.passes.verify import verify

Pass = Callable[[Graph], Graph]

DEFAULT_PASSES: tuple[tuple[str, Pass], ...] = (
    ("prune", prune),
    ("fold_constants", fold_constants),
    ("eliminate_common_subexpressions", eliminate_common_subexpressions),
)


@dataclass
class PassReport:
    """What each pass did: (round, pass name, nodes before, nodes after)."""

    stages: list[tuple[int, str, int, int]] = field(default_factory=list)
    dumps: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return "\n".join(
            f"round {r} {name:<34} {before:>5} -> {after:>5} nodes"
            for r, name, before, after in self.stages
        )


def fingerprint(graph: Graph) -> tuple:
    return (
        tuple(
            (n.name, n.op, n.inputs, n.control_inputs, n.device, hashable(n.attrs))
            for n in graph.nodes
        ),
        tuple(sorted(graph.outputs.items(), key=lambda item: item[0])),
    )


def run_passes(
    graph: Graph,
    passes: Sequence[tuple[str, Pass]] = DEFAULT_PASSES,
    *,
    max_rounds: int = 4,
    dump: bool = False,
) -> tuple[Graph, PassReport]:
    """Apply ``passes`` in order, verifying after each, until a fixed point.

    With ``dump=True`` the report keeps the printed graph after every stage (TF's graph dumps).

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (2,), "float64")
    >>> graph, report = run_passes(b.build({"y": ops.exp(x) + ops.exp(x)}))
    >>> len(graph.nodes)
    3
    """
    report = PassReport()
    verify(graph, after="input")
    for round_number in range(1, max_rounds + 1):
        before_round = fingerprint(graph)
        for name, transform in passes:
            size = len(graph.nodes)
            graph = transform(graph)
            verify(graph, after=name)
            report.stages.append((round_number, name, size, len(graph.nodes)))
            if dump:
                report.dumps[f"{round_number}:{name}"] = str(graph)
        if fingerprint(graph) == before_round:
            break
    return graph, report
