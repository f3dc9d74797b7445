"""A custom loop's GPU code path, on CPUs through the strict CuPy double (``pytest -m
gpu_path``): the rows a step function is given go to the device, its gradients stay device
arrays, and the loop still ends with ``fit``'s variables on the same devices bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import workbench
from tests.distribute.test_custom_loop import FIT_OPTIONS, _model

pytestmark = [pytest.mark.integration, pytest.mark.gpu_path]

OPTIONS = {**FIT_OPTIONS, "steps": 6}


def test_a_mirrored_custom_loop_on_gpu_devices_is_fit(cpu_double_gpus, no_leftover_processes):
    fit_strategy = workbench.MirroredStrategy(devices=2, device_type="gpu", allreduce="ring")
    with fit_strategy.scope():
        fitted = _model()
    expected = fitted.fit(**OPTIONS)
    assert expected.summary["device_type"] == "gpu"

    strategy = workbench.MirroredStrategy(
        devices=["/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:0"],
        allreduce="ring",
    )
    assert strategy.settings["device_type"] == "gpu"  # the names say so
    with strategy:
        with strategy.scope():
            model = _model()
        model.compile(**OPTIONS)
        dataset = strategy.experimental_distribute_dataset("digits", 64, seed=OPTIONS["seed"])

        def step_fn(inputs):
            loss, gradients = model.compute_gradients(*inputs)
            kinds = {type(value).__module__.split(".")[0] for value in gradients.values()}
            model.optimizer_apply(gradients)
            return loss, kinds, workbench.get_replica_context().device

        for _, inputs in zip(range(OPTIONS["steps"]), dataset):
            results = strategy.run(step_fn, args=(inputs,))
        variables = strategy.gather_variables()
    for _, kinds, device in results.values:
        assert "numpy" not in kinds and "device:GPU" in device
    for name, value in expected.parameters.items():
        assert np.array_equal(variables[name], value), name
