"""Graph passes: pure ``Graph -> Graph`` functions run in a verified, named order
(``pass_runner``); ``list_schedule`` predicts a placed graph's step.

What flows in: a graph from the builder or from autodiff, with named outputs. What flows out: an
equivalent graph that computes the same outputs and performs the same effects with fewer nodes.
Passes never mutate their input; :func:`verify` runs between them.
"""

from workbench.passes.common_subexpressions import eliminate_common_subexpressions
from workbench.passes.fold_constants import fold_constants
from workbench.passes.list_schedule import Schedule, predict_schedule
from workbench.passes.partition import Partitioned, PartitionError, Transfer, partition
from workbench.passes.pass_runner import DEFAULT_PASSES, PassReport, run_passes
from workbench.passes.place import PlacementError, place
from workbench.passes.prune import extract, prune
from workbench.passes.verify import GraphVerificationError, verify

__all__ = [
    "DEFAULT_PASSES",
    "GraphVerificationError",
    "PartitionError",
    "Partitioned",
    "PassReport",
    "PlacementError",
    "Schedule",
    "Transfer",
    "eliminate_common_subexpressions",
    "extract",
    "fold_constants",
    "partition",
    "place",
    "predict_schedule",
    "prune",
    "run_passes",
    "verify",
]
