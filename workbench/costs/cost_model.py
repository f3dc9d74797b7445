"""The cost model the placer and the planner ask: "how long does this node take on that
device" and "how long does this tensor take from A to B".

- :class:`StaticCostModel`: fixed rates (~90 GFLOP/s, the single-thread sgemm peak of the
  2-core development machine; 2.2 GB/s and 2 ms a message, Dask's comms before the
  shared-memory channels). Used where nothing was measured (``--no-calibrate``, tests).
- :class:`CalibratedCostModel`: a :class:`~workbench.costs.calibration.Calibration`'s
  measured times. A node whose signature was not timed on that device takes the time measured
  for it on another device (a homogeneous cluster), else its FLOPs at the rate measured for its
  op kind, else the static estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Protocol

from workbench.costs.calibration import Calibration, LinkFit
from workbench.costs.op_costs import estimate_flops, op_signature
from workbench.ir.graph import Graph, Node


class CostModel(Protocol):
    def node_seconds(self, graph: Graph, node: Node, device: str) -> float: ...

    def transfer_seconds(self, nbytes: int, source: str, destination: str) -> float: ...


@dataclass(frozen=True)
class StaticCostModel:
    """Fixed rates: the placer needs their ratios more than their values.

    Examples
    --------
    >>> StaticCostModel().transfer_seconds(2_200_000, "a", "b")
    0.003
    >>> StaticCostModel().transfer_seconds(2_200_000, "a", "a")
    0.0
    """

    flops_per_second: float = 90e9
    bytes_per_second: float = 2.2e9
    latency: float = 2e-3

    def node_seconds(self, graph: Graph, node: Node, device: str) -> float:
        if node.op in ("placeholder", "constant", "variable"):
            return 0.0
        return estimate_flops(graph, node) / self.flops_per_second

    def transfer_seconds(self, nbytes: int, source: str, destination: str) -> float:
        if source == destination:
            return 0.0
        return self.latency + nbytes / self.bytes_per_second

    def describe(self) -> str:
        """Examples
        --------
        >>> StaticCostModel().describe()
        'fixed rates: 90 GFLOP/s, 2.2 GB/s and 2 ms a message'
        """
        return (
            f"fixed rates: {self.flops_per_second / 1e9:g} GFLOP/s, "
            f"{self.bytes_per_second / 1e9:g} GB/s and {self.latency * 1e3:g} ms a message"
        )


class CalibratedCostModel:
    """Times measured on the devices (see the module docstring for what stands in for a time
    that was not measured)."""

    def __init__(self, calibration: Calibration, fallback: CostModel | None = None) -> None:
        self.calibration = calibration
        self.fallback = fallback or StaticCostModel()
        self._any_device: dict[str, float] = {}
        for times in calibration.op_seconds.values():
            for signature, seconds in times.items():
                self._any_device.setdefault(signature, seconds)
        self._flop_rates: dict[str, float] = {}

    def node_seconds(self, graph: Graph, node: Node, device: str) -> float:
        if node.op in ("placeholder", "constant"):
            return 0.0
        signature = op_signature(graph, node)
        seconds = self.calibration.op_seconds.get(device, {}).get(signature)
        if seconds is None:
            seconds = self._any_device.get(signature)
        if seconds is None:
            rate = self._rate_of(node.op)
            if rate is None:
                return self.fallback.node_seconds(graph, node, device)
            seconds = estimate_flops(graph, node) / rate
        return seconds

    def is_measured(self, graph: Graph, node: Node) -> bool:
        """Whether ``node``'s signature was timed on some device (else its time is scaled
        from a measured FLOP rate, or the static estimate).

        Examples
        --------
        >>> from workbench.ir import GraphBuilder, ops
        >>> b = GraphBuilder()
        >>> x = b.placeholder("x", (4,), "float32")
        >>> graph = b.build({"y": ops.relu(x)})
        >>> timed = Calibration("sig", ("a",), {"a": {"relu(4:float32)": 1e-6}})
        >>> model, relu = CalibratedCostModel(timed), graph.nodes[-1]
        >>> model.is_measured(graph, relu), model.node_seconds(graph, relu, "b")
        (True, 1e-06)
        """
        return op_signature(graph, node) in self._any_device

    def describe(self) -> str:
        """Examples
        --------
        >>> c = Calibration("sig", ("a", "b"), {"a": {"relu(4:float32)": 1e-6}},
        ...                 {"a -> b": LinkFit(5e-5, 2e9)})
        >>> CalibratedCostModel(c).describe()
        'measured: 1 node timings on 2 devices; links 0.050 ms + 2.0 GB/s'
        """
        fits = list(self.calibration.links.values())
        links = "no links measured (fixed rates)"
        if fits:
            latency = median(fit.latency for fit in fits)
            bandwidth = median(fit.bandwidth for fit in fits)
            links = f"links {latency * 1e3:.3f} ms + {bandwidth / 1e9:.1f} GB/s"
        return (
            f"measured: {len(self._any_device)} node timings on "
            f"{len(self.calibration.devices)} devices; {links}"
        )

    def _rate_of(self, op: str) -> float | None:
        """FLOP/s measured for ``op`` on its timed shapes (the median), from signatures alone:
        each signature's shapes give its FLOPs without the graph it came from."""
        if op not in self._flop_rates:
            rates = [
                flops / seconds
                for signature, seconds in self._any_device.items()
                if signature.startswith(f"{op}(") and seconds > 0
                for flops in [_flops_of_signature(signature)]
                if flops
            ]
            self._flop_rates[op] = median(rates) if rates else 0.0
        return self._flop_rates[op] or None

    def link(self, source: str, destination: str) -> LinkFit | None:
        return self.calibration.link(source, destination)

    def transfer_seconds(self, nbytes: int, source: str, destination: str) -> float:
        if source == destination:
            return 0.0
        fit = self.calibration.link(source, destination)
        if fit is None:
            return self.fallback.transfer_seconds(nbytes, source, destination)
        return fit.seconds(nbytes)


def _flops_of_signature(signature: str) -> float:
    """The FLOPs :func:`estimate_flops` gives a node of this signature, from its shapes: for a
    matmul ``2 x M x K x N``; for other ops the elements of the largest operand (good enough to
    scale an op's measured rate to a shape that was not timed).

    Examples
    --------
    >>> _flops_of_signature("matmul(4x3:float32,3x5:float32)")
    120.0
    >>> _flops_of_signature("relu(4x3:float32)")
    12.0
    """
    inside = signature[signature.index("(") + 1 : signature.index(")")]
    shapes = [
        [int(d) for d in operand.split(":")[0].split("x")]
        for operand in inside.split(",")
        if operand.split(":")[0] not in ("", "scalar")
    ]
    if signature.startswith("matmul(") and len(shapes) == 2:
        left, right = shapes
        elements = 1
        for dimension in left:
            elements *= dimension
        return 2.0 * elements * right[-1]
    largest = 0
    for shape in shapes:
        size = 1
        for dimension in shape:
            size *= dimension
        largest = max(largest, size)
    return float(largest)
