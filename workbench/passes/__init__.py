"""Graph passes: pure ``Graph -> Graph`` functions run in a verified, named order
(``pass_runner``); ``list_schedule`` predicts a placed graph's step.

What flows in: a graph from the builder or from autodiff, with named outputs. What flows out: an
equivalent graph that computes the same outputs and performs the same effects with fewer nodes
(``recompute``, run once after the others, adds nodes: it trades compute for memory).
Passes never mutate their input; :func:`verify` runs between them.
"""

from workbench.passes.common_subexpressions import eliminate_common_subexpressions
from workbench.passes.fold_constants import fold_constants
from workbench.passes.list_schedule import Schedule, predict_schedule
from workbench.passes.partition import Partitioned, PartitionError, Transfer, partition
from workbench.passes.pass_runner import DEFAULT_PASSES, PassReport, run_passes
from workbench.passes.place import PlacementError, place
from workbench.passes.prune import extract, prune
from workbench.passes.recompute import RecomputeError, recompute, recompute_layers, recompute_passes
from workbench.passes.verify import GraphVerificationError, verify

__all__ = [
    "DEFAULT_PASSES",
    "GraphVerificationError",
    "PartitionError",
    "Partitioned",
    "PassReport",
    "PlacementError",
    "RecomputeError",
    "Schedule",
    "Transfer",
    "eliminate_common_subexpressions",
    "extract",
    "fold_constants",
    "partition",
    "place",
    "predict_schedule",
    "prune",
    "recompute",
    "recompute_layers",
    "recompute_passes",
    "run_passes",
    "verify",
]
