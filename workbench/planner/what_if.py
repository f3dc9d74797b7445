"""The what-if table: every strategy and its main options predicted for one model, batch and
cluster, ranked, with the reason each loses to the best.

A row's step is split into compute (the busiest device's compute and update), the pipeline's
bubble, communication (the rest of the simulated step: waiting on transfers and collectives)
and overhead (what a step pays outside its programs). A row loses to the best by the part
whose excess over the best's is largest; a row whose devices would need more memory than they
have loses to memory whatever its speed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from workbench.config import ConfigError, RunConfig
from workbench.models import Sequential
from workbench.optim import Optimizer
from workbench.planner.device_costs import DeviceCosts
from workbench.planner.predict import PlanningError, Prediction, predict
from workbench.strategies import STRATEGIES, validate_config

ALLREDUCE_CHOICES = ("ring", "hierarchical-copy", "reduce-to-one")
# Gradient compression on the ring: 16-bit, sparse and low-rank (--compression values).
COMPRESSION_CHOICES = ("fp16", "topk:0.01", "powersgd:2")
MICROBATCH_CHOICES = (2, 4, 8)
SHARD_CHOICES = (1, 2)
PARTS = ("compute", "communication", "bubble", "overhead")


@dataclass(frozen=True)
class WhatIfRow:
    strategy: str
    options: dict
    prediction: Prediction | None
    parts: dict[str, float]
    reason: str  # "fastest", or what it loses to the fastest by; or why it cannot run
    fits: bool = True

    @property
    def step_seconds(self) -> float | None:
        return self.prediction.step_seconds if self.prediction else None

    def to_dict(self) -> dict:
        prediction = self.prediction
        if prediction is None:
            return {
                "strategy": self.strategy,
                **self.options,
                "predicted_step_ms": None,
                "reason": self.reason,
            }
        devices = prediction.devices
        return {
            "strategy": self.strategy,
            **self.options,
            "predicted_step_ms": round(prediction.step_seconds * 1e3, 4),
            "samples_per_second": round(prediction.samples_per_second, 1),
            "bytes_per_device": max(prediction.bytes_sent(d) for d in devices),
            "memory_per_device": max(prediction.memory_bytes.values()),
            "bubble": None if prediction.bubble is None else round(prediction.bubble, 4),
            **{f"{part}_ms": round(seconds * 1e3, 4) for part, seconds in self.parts.items()},
            "reason": self.reason,
        }


def candidate_configs(base: RunConfig, devices: int) -> Iterator[RunConfig]:
    """``base``'s model and batch under each strategy and main option on ``devices``
    devices (configurations the strategies refuse, say a batch the replicas cannot split,
    are left out)."""
    common = {
        name: getattr(base, name)
        for name in ("model", "hidden", "dataset", "batch_size", "optimizer", "dtype", "seed")
    }
    yield RunConfig(strategy="one-device", **common)
    if devices < 2:
        return
    shared = {**common, "devices": devices}
    for algorithm in ALLREDUCE_CHOICES:
        yield RunConfig(strategy="mirrored", allreduce=algorithm, **shared)
    for compression in COMPRESSION_CHOICES:
        yield RunConfig(strategy="mirrored", allreduce="ring", compression=compression, **shared)
    yield RunConfig(strategy="central-storage", **shared)
    for shards in SHARD_CHOICES:
        yield RunConfig(strategy="parameter-server", ps=shards, mode="sync", **shared)
    # Async: no worker waits for another (its steps train on stale variables: see staleness).
    yield RunConfig(strategy="parameter-server", ps=1, mode="async", **shared)
    # With more devices than layers these are refused, and listed with the reason.
    yield RunConfig(strategy="model-parallel", **shared)
    for schedule in ("gpipe", "1f1b"):
        for microbatches in MICROBATCH_CHOICES:
            yield RunConfig(
                strategy="pipeline",
                stages=devices,
                microbatches=microbatches,
                schedule=schedule,
                **shared,
            )


def _options(config: RunConfig) -> dict:
    shown = {"devices": config.devices}
    shown.update({k: v for k, v in config.options.items() if k in _SHOWN_OPTIONS})
    return shown


_SHOWN_OPTIONS = (
    "allreduce",
    "compression",
    "ps",
    "mode",
    "stages",
    "microbatches",
    "schedule",
)


def _parts(prediction: Prediction) -> dict[str, float]:
    compute = max(prediction.busy(device) for device in prediction.devices)
    bubble = (prediction.bubble or 0.0) * prediction.makespan
    communication = max(0.0, prediction.makespan - compute - bubble)
    return {
        "compute": compute,
        "communication": communication,
        "bubble": bubble,
        "overhead": prediction.step_seconds - prediction.makespan,
    }


def what_if(
    base: RunConfig,
    model: Sequential,
    optimizer: Optimizer,
    costs: DeviceCosts,
    devices: int,
    device_names: Sequence[str] | None = None,
    memory_capacity: int | None = None,
) -> list[WhatIfRow]:
    """Every candidate configuration predicted and ranked (fastest first; configurations that
    do not fit in memory or cannot be predicted last)."""
    rows = []
    for config in candidate_configs(base, devices):
        try:
            config = validate_config(config)
            STRATEGIES[config.strategy].check_model(config, model)
        except ConfigError as error:
            if (
                config.strategy in ("model-parallel", "pipeline")
                and config.options.get("microbatches", MICROBATCH_CHOICES[0])
                == MICROBATCH_CHOICES[0]
            ):
                rows.append(WhatIfRow(config.strategy, _options(config), None, {}, str(error)))
            continue
        names = None
        if device_names is not None:
            count = 1 if config.strategy == "one-device" else devices
            if config.strategy == "parameter-server":
                count = devices + config.ps
            names = list(device_names[: min(count, devices)])
            # Parameter-server tasks beyond the described devices: processes of their own
            # (on hosts of their own, so reached over the inter-host links).
            names += [f"ps{task}" for task in range(count - len(names))]
        try:
            prediction = predict(config, model, optimizer, costs, names)
        except PlanningError as error:
            rows.append(WhatIfRow(config.strategy, _options(config), None, {}, str(error), False))
            continue
        fits = memory_capacity is None or max(prediction.memory_bytes.values()) <= memory_capacity
        rows.append(
            WhatIfRow(config.strategy, _options(config), prediction, _parts(prediction), "", fits)
        )
    return rank_rows(rows)


def rank_rows(rows: list[WhatIfRow]) -> list[WhatIfRow]:
    """Fastest first, each row's reason against the fastest that fits; rows without a
    prediction last."""
    predicted = sorted(
        (row for row in rows if row.prediction is not None),
        key=lambda row: (not row.fits, row.step_seconds),
    )
    best = next((row for row in predicted if row.fits), None)
    ranked = []
    for row in predicted:
        if not row.fits:
            reason = "memory: needs more than a device has"
        elif row is best:
            reason = "fastest"
        else:
            excess = {part: row.parts[part] - best.parts[part] for part in PARTS}
            part = max(excess, key=excess.get)
            reason = f"{part} (+{excess[part] * 1e3:.2f} ms over the fastest)"
        ranked.append(
            WhatIfRow(row.strategy, row.options, row.prediction, row.parts, reason, row.fits)
        )
    return ranked + [row for row in rows if row.prediction is None]


def format_table(rows: Sequence[WhatIfRow]) -> str:
    """The table ``dtrain plan --what-if`` prints."""
    lines = [
        f"{'strategy':<17} {'options':<38} {'step ms':>9} {'samples/s':>11} "
        f"{'MB sent/dev':>11} {'MB mem/dev':>10} {'bubble':>6}  reason"
    ]
    for row in rows:
        options = " ".join(f"{k}={v}" for k, v in row.options.items())
        data = row.to_dict()
        if row.prediction is None:
            lines.append(f"{row.strategy:<17} {options:<38} {'-':>9}  {row.reason}")
            continue
        bubble = "-" if data["bubble"] is None else f"{data['bubble']:.2f}"
        lines.append(
            f"{row.strategy:<17} {options:<38} {data['predicted_step_ms']:>9.2f} "
            f"{data['samples_per_second']:>11,.0f} {data['bytes_per_device'] / 1e6:>11.2f} "
            f"{data['memory_per_device'] / 1e6:>10.1f} {bubble:>6}  {row.reason}"
        )
    return "\n".join(lines)
