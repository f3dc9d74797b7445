"""Device constraints written in model code decide model-parallel placement."""

from collections import defaultdict

import numpy as np
import pytest

import workbench
from workbench.config import ConfigError, RunConfig
from workbench.launch.runner import run_training
from workbench.models import Dense, Flatten, Sequential
from workbench.optim import make_optimizer
from workbench.parallel.model_parallel.graph import build_model_parallel_graph

BODY_WIDTH = 16  # the last body layer's width: its activation is what crosses to the head


def constrained_model(head_device):
    with workbench.device("/task:0"):
        body = [Flatten(), Dense(32, activation="relu"), Dense(16, activation="relu")]
    with workbench.device(head_device):
        head = [Dense(10)]
    return Sequential(body + head, (1, 8, 8))


@pytest.mark.integration
def test_layers_run_where_the_user_pinned_them(store_root, no_leftover_processes):
    # The greedy placer puts the nodes no constraint names (such as the loss's own nodes)
    # where the costs say; a run uses the costs measured for its cluster, even cached ones
    # under --no-calibrate, which other runs of the session may have left in the store. In a
    # store of its own and without calibration the run places with the fixed rates, as the
    # plan built below does.
    config = RunConfig(
        strategy="model-parallel",
        devices=2,
        steps=5,
        dtype="float64",
        lr_decay="none",
        no_calibrate=True,
    )
    result = run_training(config, progress=lambda _: None, model=constrained_model("/task:1"))
    reference = run_training(
        RunConfig(steps=5, dtype="float64", lr_decay="none"),
        progress=lambda _: None,
        model=constrained_model("/task:1"),
    )
    for name, value in reference.parameters.items():
        assert abs(result.parameters[name] - value).max() <= 1e-12 * abs(value).max()

    devices = [d["device"] for d in result.summary["per_device"]]
    body, head = devices
    assert "/task:0/" in body and "/task:1/" in head
    # Placement: the run's devices get the partitions of this plan (the strategy builds it
    # from the same model, optimizer, batch, dtype and device names). Each layer sits where
    # its constraint put it, and each device's partition holds exactly its layers' variables.
    batch, itemsize = result.summary["global_batch_size"], np.dtype(config.dtype).itemsize
    plan = build_model_parallel_graph(
        constrained_model("/task:1"),
        make_optimizer(config.optimizer),
        batch,
        config.dtype,
        devices,
    )
    assert dict(plan.layer_devices) == {
        "flatten_0": body,
        "dense_0": body,
        "dense_1": body,
        "dense_2": head,
    }
    held = {
        device: {node.attrs["var"] for node in part.nodes if node.op == "variable"}
        for device, part in plan.partitioned.partitions.items()
    }
    assert held == {
        body: {"dense_0/kernel", "dense_0/bias", "dense_1/kernel", "dense_1/bias"},
        head: {"dense_2/kernel", "dense_2/bias"},
    }
    # Only the 16-wide activation crosses forward and its gradient backward (besides
    # zero-byte ordering tokens and at most a scalar): batch rows x width x itemsize each way.
    activation = batch * BODY_WIDTH * itemsize
    tensors = sorted(
        (t.source, t.target, t.nbytes) for t in plan.partitioned.transfers if t.nbytes > itemsize
    )
    assert tensors == sorted([(body, head, activation), (head, body, activation)])

    # What the run's devices reported, step by step: the body sends the activation and
    # nothing else, the head receives it and nothing else, and the gradient the body
    # receives has the activation's size.
    sent, received = defaultdict(int), defaultdict(int)
    body_receives = defaultdict(list)
    for event in result.log.phases():
        sent[event.device, event.step] += event.bytes
        received[event.device, event.step] += event.bytes_received
        if event.device == body and event.phase == "recv":
            body_receives[event.step].append(event.bytes_received)
    steps = range(result.summary["steps"])
    assert [sent[body, step] for step in steps] == [activation] * len(steps)
    assert [received[head, step] for step in steps] == [activation] * len(steps)
    for step in steps:
        assert activation in body_receives[step], (step, body_receives[step])
        assert sum(body_receives[step]) - activation <= itemsize, (step, body_receives[step])
    traffic = {d["device"]: d for d in result.summary["per_device"]}
    assert traffic[body]["bytes_sent"] == len(steps) * activation
    assert traffic[head]["bytes_received"] == len(steps) * activation


def test_a_constraint_naming_a_missing_device_fails_before_any_cluster(no_leftover_processes):
    config = RunConfig(strategy="model-parallel", devices=2, steps=5)
    with pytest.raises(ConfigError, match=r"layer dense_2: device constraint '/task:5' names no"):
        run_training(config, progress=lambda _: None, model=constrained_model("/task:5"))
