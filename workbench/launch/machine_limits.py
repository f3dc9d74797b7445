"""What this machine can hold, checked before a run starts anything: the worker processes of
a local cluster and the memory of the model's replicas (docs/security.md, "Bounded input").

Without these checks ``--devices 100000`` starts a hundred thousand worker processes and
``--hidden 1000000000`` dies in a ``MemoryError`` halfway through building the model.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence

from workbench.config import ConfigError, RunConfig

# A local cluster's devices are worker processes: beyond a few per core they only queue for
# the CPU (and the tests already run 4 devices on 2 cores).
LOCAL_DEVICES_PER_CORE = 8
# What one idle worker process of a local cluster holds (interpreter, NumPy, distributed).
WORKER_PROCESS_BYTES = 200 * 2**20
OPTIMIZER_SLOTS = {"sgd": 0, "momentum": 1, "adam": 2}
ITEM_BYTES = {"float32": 4, "float64": 8}


def available_memory() -> int:
    """Bytes this machine can give without swapping (psutil comes with distributed)."""
    import psutil

    return int(psutil.virtual_memory().available)


def check_local_devices(config: RunConfig, memory: int | None = None) -> None:
    """Refuse a local cluster this machine cannot start: more worker processes than
    :data:`LOCAL_DEVICES_PER_CORE` per core, or than its free memory holds."""
    cores = os.cpu_count() or 1
    memory = available_memory() if memory is None else memory
    by_cores = LOCAL_DEVICES_PER_CORE * cores
    by_memory = max(1, memory // WORKER_PROCESS_BYTES)
    limit = min(by_cores, by_memory)
    if config.devices > limit:
        raise ConfigError(
            "--devices",
            f"{config.devices} devices would start {config.devices} worker processes on this "
            f"machine ({cores} CPU cores, {_gib(memory)} free), which holds at most {limit} "
            f"({LOCAL_DEVICES_PER_CORE} per core, about {_gib(WORKER_PROCESS_BYTES)} each); "
            "for more devices join a cluster with --cluster or --scheduler-file",
        )


def mlp_parameter_count(input_shape: Sequence[int], hidden: Sequence[int], classes: int) -> int:
    """The parameters of the ``mlp`` preset (weights and biases of its dense layers), counted
    without building it.

    Examples
    --------
    >>> mlp_parameter_count((64,), (32,), 10)  # 64*32 + 32 + 32*10 + 10
    2410
    """
    widths = [math.prod(input_shape), *hidden, classes]
    return sum(a * b + b for a, b in itertools.pairwise(widths))


def replica_bytes(config: RunConfig, parameters: int, activations_per_sample: int) -> int:
    """One replica's memory in training: weights, gradients and the optimizer's slots, plus
    the forward activations kept for backward (and their gradients) for the global batch."""
    item = ITEM_BYTES.get(config.dtype, 8)
    states = 2 + OPTIMIZER_SLOTS.get(config.optimizer, 2)
    return item * (states * parameters + 2 * config.batch_size * activations_per_sample)


def check_mlp_fits(
    config: RunConfig,
    input_shape: Sequence[int],
    classes: int,
    local_devices: int,
    memory: int | None = None,
) -> None:
    """Refuse ``--hidden`` widths whose replicas (one per local device, at least one in this
    process) cannot fit in this machine's free memory, with the estimate."""
    parameters = mlp_parameter_count(input_shape, config.hidden, classes)
    one = replica_bytes(config, parameters, sum(config.hidden) + classes)
    replicas = max(1, local_devices)
    memory = available_memory() if memory is None else memory
    if one * replicas > memory:
        held = f"{replicas} replicas need about {_gib(one * replicas)}" if replicas > 1 else ""
        raise ConfigError(
            "--hidden",
            f"the mlp {','.join(map(str, config.hidden))} has {parameters:,} parameters; one "
            f"replica needs about {_gib(one)} ({config.dtype} weights, gradients and "
            f"{config.optimizer}'s state, activations of a {config.batch_size}-sample batch)"
            + (f", {held}" if held else "")
            + f", but this machine has {_gib(memory)} free; choose smaller widths",
        )


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def build_checked_model(config: RunConfig, input_shape, classes: int, local_devices: int):
    """``config``'s model preset for this data, once it is known to fit (a ``MemoryError``
    while building becomes a :class:`ModelError` naming the model)."""
    from workbench.models import ModelError, build_model

    if config.model == "mlp":
        check_mlp_fits(config, input_shape, classes, local_devices)
    try:
        return build_model(config.model, input_shape, classes, config.hidden)
    except MemoryError:
        raise ModelError(
            f"model {config.model} with hidden {','.join(map(str, config.hidden))} does not fit "
            f"in this machine's memory ({_gib(available_memory())} free)"
        ) from None
