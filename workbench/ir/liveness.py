"""A graph's live tensor bytes, node by node, without running it.

The interpreter (:mod:`workbench.ir.interpreter`) runs nodes in graph order and drops each value
after its last reader; run with a :class:`~workbench.ir.memory.MemoryLedger` it holds every value
as it appears and releases it where it drops it, counted by the buffer the value views. This
module walks the same order with the same rules, from the nodes' static types, so its peak is
the measured one byte for byte (docs/guide/planning.md, "Memory per device"):

- fed values (placeholders) and constants are held from the start of the run, a value a
  node makes from that node; each is dropped after its last reader, a node's result nobody
  reads right after that node, a fed value or constant nobody reads at the end of the run;
- a fetched value lives to the end of the run (the caller has it), unless the run hands
  fetches over without keeping them (``keep_fetches=False``);
- a variable read is the device's own buffer, which the device holds as parameters or optimizer
  state: it adds nothing here, nor does any view of it;
- ops whose result NumPy gives as a view (:data:`VIEW_OPS`; ``reshape`` only of contiguous
  data, ``cast`` only to the same dtype) hold their input's buffer again, which adds nothing,
  and a buffer keeps the category of the value that first held it;
- a value fetched under a key starting ``grad/`` counts as gradients, every other value as
  activations.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from workbench.ir.graph import Graph, Node, TensorType, Value
from workbench.ir.interpreter import GRADIENT_PREFIX
from workbench.ir.memory import CATEGORIES, MemoryPeak

# Ops whose NumPy result views their first input's buffer (see _views for the conditions).
VIEW_OPS = frozenset({"reshape", "transpose", "broadcast_to", "slice", "split", "cast"})
# A buffer the device holds itself (a variable's): never counted by a graph's run.
_RESIDENT = "resident"


@dataclass(frozen=True)
class LiveBytes:
    """Live bytes by category at each moment a node's results have appeared and its dead
    inputs not yet gone (the moments a peak can fall on), in graph order; ``at_start``: what
    the feeds hold before the first node."""

    at_start: dict[str, int]
    after: tuple[tuple[str, dict[str, int]], ...]  # (node name, bytes by category)
    # Each fetched value's buffer and that buffer's bytes (None: a buffer the run does not
    # count, such as a variable's), so a caller keeping several knows which are one.
    fetched_buffers: dict[str, tuple[str, int] | None] = field(default_factory=dict)

    def peak(self) -> MemoryPeak:
        return peak_of([self.at_start, *(held for _, held in self.after)])


def graph_peak(
    graph: Graph,
    fetches: Mapping[str, Value] | None = None,
    keep_fetches: bool = True,
    external: Collection[str] = (),
) -> MemoryPeak:
    """The high-water of a run of ``graph`` fetching ``fetches`` (default: its outputs), as a
    ledger measures it (resident variables excluded; see :func:`live_bytes`)."""
    return live_bytes(graph, fetches, keep_fetches, external).peak()


def live_bytes(
    graph: Graph,
    fetches: Mapping[str, Value] | None = None,
    keep_fetches: bool = True,
    external: Collection[str] = (),
    gathered: Mapping[str, tuple[str, int]] | None = None,
    fed_from: Mapping[str, int] | None = None,
) -> LiveBytes:
    """The live bytes of a run of ``graph``, node by node (module docstring for the rules).
    ``keep_fetches=False``: each fetched value is dropped once handed over, like any other
    value after its last reader. ``external``: nodes whose results are buffers the caller
    counts already (a pipeline stage's stashed input, the receives of pulled variables),
    counted here as nothing.
    ``gathered``: variables whose reads are not resident but views of a buffer gathered for
    them (a variable's ``var`` -> that buffer's key and bytes), held as parameters while a
    read of it lives. ``fed_from``: placeholders fed with a view of a larger buffer (a
    micro-step's slice of the batch) -> that buffer's bytes, which the view holds."""
    fetched = dict(graph.outputs if fetches is None else fetches)
    category_of: dict[Value, str] = {}
    for key, value in fetched.items():
        gradient = key.startswith(GRADIENT_PREFIX)
        if gradient or value not in category_of:
            category_of[value] = "gradients" if gradient else "activations"
    last_reader: dict[Value, int] = {}
    for position, node in enumerate(graph.nodes):
        for value in node.inputs:
            last_reader[value] = position
    kept = set(category_of) if keep_fetches else set()
    buffer_of: dict[Value, str] = {}
    contiguous: dict[Value, bool] = {}
    walk = _Walk()
    for node in graph.nodes:
        if node.op not in ("placeholder", "constant"):
            continue
        value = node.output()
        contiguous[value] = True
        if node.name in external:
            buffer_of[value] = _RESIDENT
            continue
        buffer_of[value] = value.node
        nbytes = (fed_from or {}).get(node.name, node.types[0].nbytes)
        walk.hold(value.node, category_of.get(value, "activations"), nbytes)
    at_start = walk.current()
    moments: list[tuple[str, dict[str, int]]] = []
    for position, node in enumerate(graph.nodes):
        if node.op in ("placeholder", "constant"):
            continue
        made = [node.output(index) for index in range(len(node.types))]
        for value, kind in zip(made, node.types):
            viewed = _views(graph, node, contiguous)
            if node.op == "variable" and gathered and node.attrs["var"] in gathered:
                buffer, nbytes = gathered[node.attrs["var"]]
                buffer_of[value], contiguous[value] = buffer, True
                walk.hold(buffer, "parameters", nbytes)
                continue
            if node.op == "variable" or node.name in external:
                buffer, contiguous[value] = _RESIDENT, True
            elif viewed is not None:
                buffer = buffer_of[viewed]
                contiguous[value] = contiguous[viewed] and _keeps_contiguous(
                    graph.type_of(viewed), node, kind
                )
            else:
                buffer, contiguous[value] = str(value), True
            buffer_of[value] = buffer
            if buffer != _RESIDENT:
                walk.hold(buffer, category_of.get(value, "activations"), kind.nbytes)
        moments.append((node.name, walk.current()))
        # Dropped here: the inputs this node reads last and the results nobody reads.
        dropped = [v for v in node.inputs if last_reader.get(v) == position]
        dropped += [v for v in made if v not in last_reader]
        for value in dict.fromkeys(dropped):
            buffer = buffer_of[value]
            if value not in kept and buffer != _RESIDENT:
                walk.release(buffer)
    buffers = {
        key: None
        if buffer_of[value] == _RESIDENT
        else (buffer_of[value], walk.size[buffer_of[value]])
        for key, value in fetched.items()
        if value in buffer_of
    }
    return LiveBytes(at_start, tuple(moments), buffers)


def _views(graph: Graph, node: Node, contiguous: Mapping[Value, bool]) -> Value | None:
    """The input whose buffer ``node``'s results view, or None."""
    if node.op not in VIEW_OPS or not node.inputs:
        return None
    source = node.inputs[0]
    if node.op == "reshape" and not contiguous.get(source, True):
        return None  # NumPy copies a reshape of non-contiguous data
    if node.op == "cast" and graph.type_of(source).dtype != node.attrs["dtype"]:
        return None
    return source


def _keeps_contiguous(source: TensorType, node: Node, result: TensorType) -> bool:
    """Whether a view ``node`` makes of C-contiguous ``source`` is C-contiguous itself."""
    if node.op in ("reshape", "cast"):
        return True
    if node.op == "broadcast_to":
        return result.size == source.size
    if node.op == "transpose":
        moved = [axis for axis in node.attrs["perm"] if source.shape[axis] != 1]
        return moved == sorted(moved)
    # slice and split: contiguous while the cut axis has only unit axes before it and whole
    # axes after it.
    cut = [axis for axis, (a, b) in enumerate(zip(source.shape, result.shape)) if a != b]
    if not cut:
        return True
    first = cut[0]
    return len(cut) == 1 and all(size == 1 for size in result.shape[:first])


class _Walk:
    """The ledger's counting (by buffer, each hold once), without its high-water."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[str, int, int]] = {}
        self.by_category = dict.fromkeys(CATEGORIES, 0)
        self.size: dict[str, int] = {}  # every buffer ever held, by key

    def hold(self, key: str, category: str, nbytes: int) -> None:
        if key in self.held:
            kept, size, refs = self.held[key]
            self.held[key] = (kept, size, refs + 1)
            return
        self.held[key] = (category, nbytes, 1)
        self.size[key] = nbytes
        self.by_category[category] += nbytes

    def release(self, key: str) -> None:
        category, nbytes, refs = self.held[key]
        if refs > 1:
            self.held[key] = (category, nbytes, refs - 1)
            return
        del self.held[key]
        self.by_category[category] -= nbytes

    def current(self) -> dict[str, int]:
        return dict(self.by_category)


def peak_of(moments: Sequence[Mapping[str, int]]) -> MemoryPeak:
    """The high-water of a sequence of live-byte moments (each bytes by category)."""
    at_peak = max(moments, key=lambda held: sum(held.values()))
    by_category = {c: max(held.get(c, 0) for held in moments) for c in CATEGORIES}
    return MemoryPeak(sum(at_peak.values()), dict(at_peak), by_category)
