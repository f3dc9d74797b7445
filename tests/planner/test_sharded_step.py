"""The planner's sharded step sends, device by device, what a sharded replica sends (the
formulas of tests/parallel/test_sharded.py) at every ZeRO stage, and its programs run to the
end in the simulator (every gather and reduce-scatter meets its peers')."""

import pytest

from tests.parallel.test_sharded import TWO_BUCKETS, chunks, sent_per_step
from workbench.models import build_model
from workbench.optim import make_optimizer
from workbench.planner.device_costs import described_costs
from workbench.planner.sharded_step import sharded_step
from workbench.simulate import Compute, Send, parse_cluster, simulate

MODEL = build_model("mlp", (64,), 10, (32, 16))  # the digits MLP of tests/parallel


CLUSTER = parse_cluster("dgx-h100,hosts=1,gpus-per-host=4")


def _step(stage: int, accumulate: int = 1):
    return sharded_step(
        MODEL,
        make_optimizer("momentum"),
        32,
        "float64",
        CLUSTER.devices,
        described_costs(CLUSTER),
        10485,
        stage,
        accumulate=accumulate,
    )


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_accumulated_micro_steps_reduce_once_and_stage_3_gathers_in_each(stage):
    step = _step(stage, accumulate=2)
    for rank, device in enumerate(CLUSTER.devices):
        actions = step.programs[device]
        sent = sum(a.nbytes for a in actions if isinstance(a, Send))
        # One reduce-scatter (and below stage 3 one all-gather of the updated parameters);
        # at stage 3 the second micro-step's forward and backward gather again.
        scatter = sum(n - chunks(n, 4)[(rank + 1) % 4] for n in TWO_BUCKETS) * 8
        once = sent_per_step(TWO_BUCKETS, 4, rank, stage)
        assert sent == (once if stage < 3 else 2 * once - scatter), (rank, device)
        adds = [a for a in actions if isinstance(a, Compute) and a.label == "accumulate"]
        assert len(adds) == 2
    assert simulate(step.programs, step.link).makespan > 0


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_every_device_sends_the_bytes_its_replica_sends(stage):
    cluster = parse_cluster("dgx-h100,hosts=1,gpus-per-host=4")
    costs = described_costs(cluster)
    step = sharded_step(
        MODEL, make_optimizer("momentum"), 32, "float64", cluster.devices, costs, 10485, stage
    )
    for rank, device in enumerate(cluster.devices):
        sent = sum(a.nbytes for a in step.programs[device] if isinstance(a, Send))
        assert sent == sent_per_step(TWO_BUCKETS, 4, rank, stage), (rank, device)
    assert simulate(step.programs, step.link).makespan > 0


def test_a_large_rings_halves_are_one_action_a_rank_and_play_like_the_messages():
    from dataclasses import replace

    from workbench.planner.sharded_step import ring_halves
    from workbench.simulate import (
        Labels,
        Link,
        RingOptions,
        ring_allreduce_programs,
        simulate,
        uniform,
    )

    large = [f"d{i}" for i in range(300)]
    scatter, gather = ring_halves(large, 3_000_000, 4, 0.0, "g", "communication")
    whole = ring_allreduce_programs(large, 3_000_000, 0.0, "g", RingOptions(4))["d0"][0]
    for half, part in ((scatter, "reduce-scatter"), (gather, "all-gather")):
        expected = replace(whole, part=part, stream="communication")
        assert all(actions == [expected] for actions in half.values())
    # Played one action a rank, each half takes the times and bytes of its messages.
    small = [f"d{i}" for i in range(4)]
    link = uniform(Link(1e-5, 1e9))
    for part in ("reduce-scatter", "all-gather"):
        played = {}
        for vectorised in (False, True):
            options = RingOptions(4, vectorised=vectorised, labels=Labels(), part=part)
            timeline = simulate(ring_allreduce_programs(small, 40_000, 0.0, "g", options), link)
            played[vectorised] = (timeline.makespan, timeline.bytes_sent("d0"))
        assert played[True][0] == pytest.approx(played[False][0], rel=1e-12)
        # Each half passes N-1 of the N chunks on: 3 x 10,000 bytes from every rank.
        assert played[True][1] == played[False][1] == 3 * 10_000
