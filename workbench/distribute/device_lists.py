"""Devices given as names, as ``tf.distribute`` takes them:
``MirroredStrategy(devices=["/task:0", "/task:1"])``.

A list means its length as the device count, and its order maps names to replica ranks
(replica r runs on the r-th name). The workbench gives replica r the r-th worker of its
cluster (``task:r``: a local cluster names its workers so, and a ``cluster=`` scheduler's
workers are taken in name order), so a list must name ``task:0`` .. ``task:N-1`` of the
strategy's device list in that order, written any way ``--simulate-straggler`` accepts
(``"/task:1"``, ``"task:1"``, ``"/job:worker/task:1/device:CPU:0"``, ``"task1-cpu0"``).
Everything is checked when the strategy is made, before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workbench.config import ConfigError, RunConfig
from workbench.runtime.devices import names_device, short_device_name
from workbench.strategies import StrategyDefinition
from workbench.strategies.validation import resolve_options


def resolve_device_list(
    definition: StrategyDefinition, owner: str, devices: Sequence[Any], settings: Mapping
) -> tuple[int, str | None]:
    """``(device count, device type the names imply or None)`` for a list of device names;
    a :class:`ConfigError` naming ``devices`` for a name that matches no device, a device
    named twice, names out of rank order or a mix of CPU and GPU names.

    Examples
    --------
    >>> from workbench.strategies import STRATEGIES
    >>> resolve_device_list(STRATEGIES["mirrored"], "MirroredStrategy", ["/task:0", "task:1"], {})
    (2, None)
    >>> try:
    ...     resolve_device_list(STRATEGIES["mirrored"], "Mirrored", ["/task:0", "/task:5"], {})
    ... except ConfigError as error:
    ...     print(error.field, "|", str(error).split(";")[0])
    devices | devices: '/task:5' names no device of Mirrored with 2 devices
    """
    if not devices:
        raise ConfigError("devices", "an empty list names no device; give names or a count")
    for entry in devices:
        if not isinstance(entry, str):
            raise ConfigError("devices", f"expected device names like '/task:0', got {entry!r}")
    count = len(devices)
    config = _config_with(definition, count, settings)
    requested = settings.get("device_type", "auto")
    kinds = ("cpu", "gpu") if requested == "auto" else (requested,)
    # The devices ``devices`` counts are the worker job's (a parameter server counts its
    # shards with ``ps``).
    candidates = {
        kind: [n for n in definition.device_names(config, kind) if _is_worker(n)] for kind in kinds
    }
    ranks: dict[int, str] = {}
    implied: set[str] = set()
    for pattern in devices:
        found = [
            (kind, names.index(name))
            for kind, names in candidates.items()
            for name in names
            if names_device(pattern, name)
        ]
        if not found:
            raise ConfigError("devices", _no_device(definition, owner, pattern, config, kinds[0]))
        if len({kind for kind, _ in found}) == 1 and len(kinds) > 1:
            implied.add(found[0][0])  # the name says CPU or GPU
        rank = found[0][1]
        if rank in ranks:
            raise ConfigError(
                "devices",
                f"{pattern!r} names {short_device_name(candidates[kinds[0]][rank])} again "
                f"(as {ranks[rank]!r} before); name each device once",
            )
        ranks[rank] = pattern
    if len(implied) > 1:
        raise ConfigError("devices", "mixes CPU and GPU devices; a run's devices are one type")
    order = list(ranks)
    if order != sorted(order):
        expected = ", ".join(short_device_name(n) for n in candidates[kinds[0]])
        raise ConfigError(
            "devices",
            f"{owner} runs replica r on task:r of its cluster, so the list must name "
            f"{expected} in that order; got {list(devices)}",
        )
    return count, (implied.pop() if implied else None)


def _config_with(definition: StrategyDefinition, count: int, settings: Mapping) -> RunConfig:
    """The strategy's device list depends on its options (a parameter server's ``ps``): the
    ones given, else their defaults (checked and typed)."""
    options = {o.name: settings[o.name] for o in definition.options if o.name in settings}
    return resolve_options(RunConfig(strategy=definition.name, devices=count, **options))


def _is_worker(device_name: str) -> bool:
    return short_device_name(device_name).startswith("task:")


def _no_device(
    definition: StrategyDefinition, owner: str, pattern: str, config: RunConfig, kind: str
) -> str:
    names = definition.device_names(config, kind)
    workers = [name for name in names if _is_worker(name)]
    message = (
        f"{pattern!r} names no device of {owner} with {config.devices} devices; its devices "
        f"are {', '.join(workers)}"
    )
    others = [name for name in names if not _is_worker(name) and names_device(pattern, name)]
    if others:
        message += f" ({others[0]} is a parameter server: `devices` lists the workers)"
    return message
