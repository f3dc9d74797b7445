"""A discrete-event simulator of one training step, pure: programs and links in, a timeline out.

What flows in: each device's program (an ordered list of compute, send and receive actions on
one or more streams) and a link model (latency and bandwidth between any two devices). What
flows out: every action's start and end, each device's busy time and the step's makespan. No
clocks, no I/O: the same inputs give the same timeline, so tests are literal.

- ``programs``: the actions; ``links``: the link model (the sender puts its bytes on the link,
  the message arrives a latency later, one transfer at a time per directed link);
  ``engine``: :func:`simulate`, which runs ``plain_engine``; ``timeline``: what it returns.
- ``cores``: devices sharing a host's few cores (``simulate(..., cores=...)``): CPU work is
  processor-shared, as an operating system time-slices runnable processes;
  ``shared_engine`` runs programs so.
- ``collectives``: programs of our all-reduce algorithms (ring, hierarchical, and one by
  its ``--allreduce`` name, each ``*_programs`` so as not to be taken for the collectives of
  ``workbench.parallel.collectives`` they mirror); ``reduce_broadcast``: the halves of
  reduce-to-one, and ``concat_programs`` to chain programs; ``push_pull``: central storage
  and parameter servers; ``lockstep_ring``: a ring simulated for all ranks at once, so
  thousands of devices take seconds.
- ``pipeline_programs``: a pipeline step from its schedule's action lists (GPipe, 1F1B,
  interleaved, zero-bubble), its bubble and peak micro-batches in flight.
- ``clusters`` and ``cluster_text``: described clusters (presets, ``--what-if-cluster``).
"""

from workbench.simulate.cluster_text import parse_cluster, parse_link
from workbench.simulate.clusters import (
    DEVICES,
    PRESETS,
    ClusterDescription,
    DeviceDescription,
    hosts_of,
)
from workbench.simulate.collectives import (
    ALLREDUCE_ALGORITHMS,
    RingOptions,
    allreduce_programs,
    hierarchical_allreduce_programs,
    ring_allreduce_programs,
)
from workbench.simulate.engine import DeadlockError, simulate
from workbench.simulate.links import Link, LinkModel, uniform
from workbench.simulate.pipeline_programs import peak_in_flight, pipeline_bubble, pipeline_programs
from workbench.simulate.programs import (
    Action,
    Compute,
    Labels,
    Recv,
    RingAllReduce,
    RingPart,
    Send,
    Signal,
    Wait,
)
from workbench.simulate.push_pull import push_pull
from workbench.simulate.reduce_broadcast import (
    broadcast_programs,
    concat_programs,
    reduce_programs,
)
from workbench.simulate.timeline import Interval, Timeline

__all__ = [
    "ALLREDUCE_ALGORITHMS",
    "DEVICES",
    "PRESETS",
    "Action",
    "ClusterDescription",
    "Compute",
    "DeadlockError",
    "DeviceDescription",
    "Interval",
    "Labels",
    "Link",
    "LinkModel",
    "Recv",
    "RingAllReduce",
    "RingOptions",
    "RingPart",
    "Send",
    "Signal",
    "Timeline",
    "Wait",
    "allreduce_programs",
    "broadcast_programs",
    "concat_programs",
    "hierarchical_allreduce_programs",
    "hosts_of",
    "parse_cluster",
    "parse_link",
    "peak_in_flight",
    "pipeline_bubble",
    "pipeline_programs",
    "push_pull",
    "reduce_programs",
    "ring_allreduce_programs",
    "simulate",
    "uniform",
]
