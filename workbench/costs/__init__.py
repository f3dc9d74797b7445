"""Cost models: how long a node takes on a device, how long a tensor takes from A to B.

What flows in: a calibration (times measured on the real devices, plain data) or nothing (fixed
rates). What flows out: seconds, for the placer (:mod:`workbench.passes.place`) and the
planner. Estimates of a node's FLOPs and bytes, and the signature its measured time is stored
under, live here too.
"""

from workbench.costs.calibration import (
    STAGE_HANDOFF,
    TENSOR_ALLREDUCE,
    Calibration,
    LinkFit,
    collective_key,
    fit_link,
    link_key,
)
from workbench.costs.cost_model import CalibratedCostModel, CostModel, StaticCostModel
from workbench.costs.op_costs import (
    estimate_bytes,
    estimate_flops,
    graph_signature,
    op_signature,
)

__all__ = [
    "STAGE_HANDOFF",
    "TENSOR_ALLREDUCE",
    "CalibratedCostModel",
    "Calibration",
    "CostModel",
    "LinkFit",
    "StaticCostModel",
    "collective_key",
    "estimate_bytes",
    "estimate_flops",
    "fit_link",
    "graph_signature",
    "link_key",
    "op_signature",
]
