"""The planner's accumulated step: K micro-step computes at the micro batch, then one exchange
and one update. Costs here grow with the bytes a node writes, so a micro-step at B/K is
cheaper than a pass at B and the count of micro-steps shows in the prediction."""

import math

import pytest

from workbench.config import RunConfig
from workbench.models import build_model
from workbench.optim import make_optimizer
from workbench.planner.device_costs import DeviceCosts
from workbench.planner.predict import predict, step_programs
from workbench.simulate import Compute, Link, Send
from workbench.strategies import validate_config

MODEL = build_model("mlp", (16,), 4, (8, 8))
OPTIMIZER = make_optimizer("sgd")


class BytesWritten:
    """A node costs a microsecond per kilobyte it writes, and a microsecond to launch."""

    def node_seconds(self, graph, node, device):
        if node.op == "variable":
            return 0.0
        return 1e-6 + sum(t.nbytes for t in node.types) * 1e-9


def costs(add_bytes_per_second=math.inf) -> DeviceCosts:
    link = Link(1e-5, 1e8)
    return DeviceCosts(
        cost_model=BytesWritten(),
        peer_links={},
        rpc_links={},
        default_peer=link,
        default_rpc=link,
        add_bytes_per_second=add_bytes_per_second,
        step_overhead_seconds=0.0,
        dispatch_seconds=0.0,
        source="literal",
        collectives={},
    )


def config(**values) -> RunConfig:
    return validate_config(RunConfig(optimizer="sgd", **values))


def programs(run: RunConfig, add_bytes_per_second=math.inf):
    devices = [f"d{i}" for i in range(run.devices + (run.options.get("ps") or 0))]
    return step_programs(run, MODEL, OPTIMIZER, costs(add_bytes_per_second), devices).programs


def computing(actions, phase="compute") -> float:
    return sum(a.seconds for a in actions if isinstance(a, Compute) and a.phase == phase)


def sends(actions) -> list[int]:
    return [a.nbytes for a in actions if isinstance(a, Send)]


DATA_PARALLEL = [
    {"strategy": "mirrored", "devices": 2},
    {"strategy": "central-storage", "devices": 2},
    {"strategy": "parameter-server", "devices": 2, "ps": 1},
]


@pytest.mark.parametrize("flags", DATA_PARALLEL, ids=lambda f: f["strategy"])
def test_two_micro_steps_at_batch_b_compute_twice_a_step_at_b_over_2_and_exchange_once(flags):
    accumulated = programs(config(batch_size=32, accumulate=2, **flags))
    half = programs(config(batch_size=16, **flags))
    whole = programs(config(batch_size=32, **flags))
    replica = "d0"
    assert computing(accumulated[replica]) == pytest.approx(2 * computing(half[replica]))
    # Each micro-step is cheaper than the pass over the replica's whole share.
    assert computing(accumulated[replica]) > computing(whole[replica])
    # One exchange of the same gradients as one pass over the batch.
    for device in accumulated:
        assert sends(accumulated[device]) == sends(whole[device])
        assert computing(accumulated[device], "update") == computing(whole[device], "update")


def test_one_device_accumulates_gradient_passes_then_updates_once():
    accumulated = programs(config(batch_size=32, accumulate=4))["d0"]
    quarter = programs(config(batch_size=8))["d0"]
    # A micro-step is the training graph without its update (the fused graph's compute part).
    assert computing(accumulated) == pytest.approx(4 * computing(quarter), rel=0.02)
    assert computing(accumulated, "update") == pytest.approx(computing(quarter, "update"))


def test_adding_each_micro_step_into_the_buffers_is_counted():
    run = config(strategy="mirrored", devices=2, batch_size=32, accumulate=4)
    free, priced = programs(run), programs(run, add_bytes_per_second=1e6)
    gradient_bytes = sum(math.prod(s) for s in MODEL.parameter_shapes().values()) * 4
    # Four micro-steps, each adding its gradients (the first into fresh buffers).
    assert computing(priced["d0"]) - computing(free["d0"]) == pytest.approx(
        4 * gradient_bytes / 1e6
    )


def test_the_predicted_step_grows_with_the_micro_steps_at_one_global_batch():
    devices = ["d0", "d1"]
    steps = [
        predict(
            config(strategy="mirrored", devices=2, batch_size=32, accumulate=k),
            MODEL,
            OPTIMIZER,
            costs(),
            devices,
        )
        for k in (1, 2, 4)
    ]
    seconds = [prediction.step_seconds for prediction in steps]
    assert seconds == sorted(seconds) and seconds[0] < seconds[-1]
    assert {p.bytes_sent("d0") for p in steps} == {steps[0].bytes_sent("d0")}
