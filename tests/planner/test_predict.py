"""Predictions from literal costs: every node 1 ms, links free or priced, so each strategy's
predicted step can be worked out by hand."""

import math

import pytest

from workbench.config import RunConfig
from workbench.costs import collective_key
from workbench.models import build_model
from workbench.optim import make_optimizer
from workbench.parallel.parameter_server.partitioner import place_variables, shard_bytes
from workbench.planner.device_costs import DeviceCosts
from workbench.planner.predict import PlanningError, predict
from workbench.simulate import Link
from workbench.strategies import validate_config
from workbench.training.graphs import build_training_graph, build_update_graph

NODE = 1e-3


class EveryNodeOneMillisecond:
    def node_seconds(self, graph, node, device):
        return 0.0 if node.op == "variable" else NODE


FREE = Link(0.0, math.inf)


def costs(link=FREE, overhead=0.0, dispatch=0.0, collectives=None) -> DeviceCosts:
    return DeviceCosts(
        cost_model=EveryNodeOneMillisecond(),
        peer_links={},
        rpc_links={},
        default_peer=link,
        default_rpc=link,
        add_bytes_per_second=math.inf,
        step_overhead_seconds=overhead,
        dispatch_seconds=dispatch,
        source="literal",
        collectives=collectives or {},
    )


MODEL = build_model("mlp", (16,), 4, (8, 8))
OPTIMIZER = make_optimizer("sgd")


def config(**values) -> RunConfig:
    return validate_config(RunConfig(batch_size=8, optimizer="sgd", **values))


def executed(graph) -> int:
    return sum(node.op not in ("placeholder", "constant", "variable") for node in graph.nodes)


def test_one_device_is_every_node_of_the_training_step_plus_the_step_overhead():
    graph = build_training_graph(MODEL, OPTIMIZER, 8, "float32").graph
    prediction = predict(config(), MODEL, OPTIMIZER, costs(overhead=2e-3))
    assert prediction.step_seconds == pytest.approx(executed(graph) * NODE + 2e-3)


def test_mirrored_with_free_links_is_one_replicas_backward_and_update_plus_dispatch():
    gradients = build_training_graph(MODEL, None, 4, "float32").graph
    update = build_update_graph(MODEL, OPTIMIZER, "float32")
    prediction = predict(
        config(strategy="mirrored", devices=2, allreduce="ring"),
        MODEL,
        OPTIMIZER,
        costs(dispatch=20e-3),
    )
    expected = (executed(gradients) + executed(update)) * NODE + 20e-3 / 20
    assert prediction.step_seconds == pytest.approx(expected)


def test_a_slow_link_makes_the_all_reduce_the_difference():
    free = predict(config(strategy="mirrored", devices=2), MODEL, OPTIMIZER, costs())
    slow = predict(config(strategy="mirrored", devices=2), MODEL, OPTIMIZER, costs(Link(0.0, 1e6)))
    gradient_bytes = sum(math.prod(shape) * 4 for shape in MODEL.parameter_shapes().values())
    # Ring: each rank puts 2(N-1)/N of the gradient on its link; all backward gradients
    # form one bucket, reduced after the last one appears.
    assert slow.step_seconds - free.step_seconds == pytest.approx(gradient_bytes / 1e6, rel=0.05)


def test_more_micro_batches_shrink_the_pipeline_bubble():
    model = build_model("mlp", (16,), 16, (16,))
    bubbles = [
        predict(
            config(strategy="pipeline", devices=2, microbatches=m, schedule="gpipe"),
            model,
            OPTIMIZER,
            costs(),
        ).bubble
        for m in (2, 4, 8)
    ]
    assert bubbles[0] > bubbles[1] > bubbles[2] > 0


def test_parameter_servers_add_the_shard_devices():
    prediction = predict(
        config(strategy="parameter-server", devices=2, ps=2), MODEL, OPTIMIZER, costs()
    )
    assert len(prediction.devices) == 4
    assert all(prediction.memory_bytes[device].total > 0 for device in prediction.devices)


def test_what_is_not_predicted_is_refused_by_its_flag():
    with pytest.raises(PlanningError, match="--compression fp16: predicted for mirrored"):
        predict(
            config(strategy="central-storage", devices=2, compression="fp16"),
            MODEL,
            OPTIMIZER,
            costs(),
        )


def test_async_parameter_servers_overlap_one_workers_update_with_the_others_compute():
    """Free links, 1 ms a node: a sync step is a worker's gradients, then the shard's sum and
    update. Async, the shard updates once per push, but while it updates for one worker the
    other computes: the steady step is a worker's loop (gradients and its own update), not
    gradients plus both updates."""
    gradients = executed(build_training_graph(MODEL, None, 4, "float32").graph) * NODE
    update = executed(build_update_graph(MODEL, OPTIMIZER, "float32")) * NODE
    sync = predict(
        config(strategy="parameter-server", devices=2, ps=1, mode="sync"),
        MODEL,
        OPTIMIZER,
        costs(),
    )
    assert sync.step_seconds == pytest.approx(gradients + update)
    run_async = predict(
        config(strategy="parameter-server", devices=2, ps=1, mode="async"),
        MODEL,
        OPTIMIZER,
        costs(),
    )
    assert run_async.rounds > 1
    assert gradients + update <= run_async.step_seconds < gradients + 2 * update


def test_measured_pulls_and_pushes_replace_the_simulated_rpcs():
    """Where calibration timed the workers' pulls and pushes as they run them (all at once),
    a sync step is: the pulls from every shard, the gradients, the pushes to every shard,
    then the shards' update, each RPC taking its measured latency plus bytes / bandwidth."""
    run = config(strategy="parameter-server", devices=2, ps=2, mode="sync")
    devices = predict(run, MODEL, OPTIMIZER, costs()).devices
    measured = {
        collective_key("ps-pull", devices): Link(1e-3, 1e6),
        collective_key("ps-push", devices): Link(2e-3, 1e6),
    }
    prediction = predict(run, MODEL, OPTIMIZER, costs(Link(5e-3, 1.0), collectives=measured))
    gradients = executed(build_training_graph(MODEL, None, 4, "float32").graph) * NODE
    pieces = place_variables(MODEL.parameter_shapes(), 2, 4)
    held = shard_bytes(pieces, 2, 4)
    updates = [
        executed(
            build_update_graph(
                MODEL, OPTIMIZER, "float32", sorted({p.variable for p in pieces if p.shard == k})
            )
        )
        * NODE
        for k in range(2)
    ]
    exchange = sum(1e-3 + 2e-3 + 2 * n / 1e6 for n in held)
    # The slow rpc links (5 ms, 1 B/s) are not used: the measured exchange stands for them.
    assert prediction.step_seconds == pytest.approx(gradients + exchange + max(updates))


def test_compression_shrinks_what_a_replica_sends_by_the_codecs_ratio():
    def sent(compression: str) -> int:
        prediction = predict(
            config(strategy="mirrored", devices=2, compression=compression),
            MODEL,
            OPTIMIZER,
            costs(),
        )
        return prediction.bytes_sent(prediction.devices[0])

    parameters = sum(math.prod(shape) for shape in MODEL.parameter_shapes().values())
    dense = sent("none")
    assert dense == parameters * 4  # 2 ranks: half each way, twice
    assert sent("fp16") == dense // 2
    # Top-k: ceil(1% of the bucket) (int64 index, float32 value) pairs to the one peer.
    assert sent("topk:0.01") == math.ceil(0.01 * parameters) * (8 + 4)
