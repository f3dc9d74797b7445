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


# The round number a ``final`` pass is reported under (it runs once, after the rounds).
FINAL_ROUND = 0


@dataclass
class PassReport:
    """What each pass did: (round, pass name, nodes before, nodes after); round
    :data:`FINAL_ROUND` for a pass run once after the fixed point."""

    stages: list[tuple[int, str, int, int]] = field(default_factory=list)
    dumps: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return "\n".join(
            f"{f'round {r}' if r != FINAL_ROUND else 'final':<7} {name:<34} "
            f"{before:>5} -> {after:>5} nodes"
            for r, name, before, after in self.stages
        )

    def summary(self) -> str:
        """One line: the rounds and the nodes they left, then each final pass's nodes (what
        ``dtrain plan`` prints).

        Examples
        --------
        >>> PassReport([(1, "prune", 9, 7), (2, "prune", 7, 7), (0, "recompute", 7, 9)]).summary()
        'graph passes: 2 rounds of prune, 9 -> 7 nodes; then recompute, 7 -> 9 nodes'
        """
        rounds = [stage for stage in self.stages if stage[0] != FINAL_ROUND]
        parts = []
        if rounds:
            names = ", ".join(dict.fromkeys(name for _, name, _, _ in rounds))
            count = max(r for r, _, _, _ in rounds)
            parts.append(
                f"{count} round{'s' if count != 1 else ''} of {names}, "
                f"{rounds[0][2]} -> {rounds[-1][3]} nodes"
            )
        parts += [
            f"then {name}, {before} -> {after} nodes"
            for r, name, before, after in self.stages
            if r == FINAL_ROUND
        ]
        return "graph passes: " + ("; ".join(parts) or "none")


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
    final: Sequence[tuple[str, Pass]] = (),
) -> tuple[Graph, PassReport]:
    """Apply ``passes`` in order, verifying after each, until a fixed point; then ``final``
    once each, in order (passes whose result the others would undo, such as recomputation,
    which common-subexpression elimination would merge back).

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
    for name, transform in final:
        size = len(graph.nodes)
        graph = transform(graph)
        verify(graph, after=name)
        report.stages.append((FINAL_ROUND, name, size, len(graph.nodes)))
        if dump:
            report.dumps[f"final:{name}"] = str(graph)
    return graph, report
