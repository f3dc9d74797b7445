"""The ``memory-plan`` suite: each device's predicted peak memory against the peak its run
measured.

Every strategy family and memory option trains the reference MLP (784-512-512-10 on
``synthetic``) and the transformer preset (on ``digits``) for a few steps with
``run_training``, as ``dtrain run`` does. The run's summary carries both sides: the planner's
prediction from the run's own calibration (:func:`workbench.planner.memory.predict_memory`,
the call ``dtrain plan`` makes) and the ``memory`` record the devices' ledgers measured
(docs/guide/command-line.md, "Measured memory"). Each device's peak is compared, total and
split by category at the peak's moment. The verdicts: at least 90% of the rows within 10% on
every device; sharded stage 3 keeps at most 0.3 of mirrored's parameter and optimizer bytes
per device at 4 devices (measured: what each device's ledger held when a step began);
recomputation lowers the measured activation bytes; 1F1B's activation peak is below GPipe's
at 8 micro-batches.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.distributed_suites import own_run_store
from benchmarks.flags import Flag, names_from, positive, settings_suite
from benchmarks.report import table, verdict, widths
from benchmarks.suite import Progress, SuiteFailed
from workbench.config import RunConfig
from workbench.ir.memory import CATEGORIES
from workbench.launch.runner import run_training
from workbench.planner.memory import DeviceMemory

CLOSE, SHARE_CLOSE, ZERO_SHARE = 0.10, 0.90, 0.30
MICROBATCHES = 8
MODELS: dict[str, dict[str, Any]] = {
    "mlp": {"model": "mlp", "dataset": "synthetic"},
    "transformer": {"model": "transformer", "dataset": "digits"},
}
# Every strategy family on 2 devices (parameter servers: 2 workers and 1 or 2 shards), the
# memory options on one device and on mirrored, and the ZeRO comparison at WIDE devices
# (``--zero-devices``).
WIDE = "wide"
ROWS: dict[str, dict[str, Any]] = {
    "one-device": {"strategy": "one-device"},
    "one-device-recompute": {"strategy": "one-device", "recompute": "full"},
    "one-device-accumulate": {"strategy": "one-device", "accumulate": 4},
    "one-device-fp16": {"strategy": "one-device", "precision": "mixed-fp16"},
    "one-device-bf16": {"strategy": "one-device", "precision": "mixed-bf16"},
    "mirrored": {"strategy": "mirrored", "devices": 2},
    "mirrored-recompute": {"strategy": "mirrored", "devices": 2, "recompute": "full"},
    "mirrored-accumulate": {"strategy": "mirrored", "devices": 2, "accumulate": 4},
    "mirrored-fp16": {"strategy": "mirrored", "devices": 2, "precision": "mixed-fp16"},
    "mirrored-bf16": {"strategy": "mirrored", "devices": 2, "precision": "mixed-bf16"},
    "central-storage": {"strategy": "central-storage", "devices": 2},
    "multi-worker-mirrored": {"strategy": "multi-worker-mirrored", "devices": 2},
    "ps-1": {"strategy": "parameter-server", "devices": 2, "ps": 1},
    "ps-2": {"strategy": "parameter-server", "devices": 2, "ps": 2},
    "gpipe": {
        "strategy": "pipeline",
        "devices": 2,
        "schedule": "gpipe",
        "microbatches": MICROBATCHES,
    },
    "1f1b": {
        "strategy": "pipeline",
        "devices": 2,
        "schedule": "1f1b",
        "microbatches": MICROBATCHES,
    },
    "hybrid": {
        "strategy": "hybrid",
        "devices": 4,
        "stages": 2,
        "schedule": "1f1b",
        "microbatches": MICROBATCHES,
    },
    "model-parallel": {"strategy": "model-parallel", "devices": 2},
    "mirrored-wide": {"strategy": "mirrored", "devices": WIDE},
    "zero-1": {"strategy": "sharded", "devices": WIDE, "zero_stage": 1},
    "zero-2": {"strategy": "sharded", "devices": WIDE, "zero_stage": 2},
    "zero-3": {"strategy": "sharded", "devices": WIDE, "zero_stage": 3},
    "zero-1-fp16": {
        "strategy": "sharded",
        "devices": 2,
        "zero_stage": 1,
        "precision": "mixed-fp16",
    },
    "zero-2-fp16": {
        "strategy": "sharded",
        "devices": 2,
        "zero_stage": 2,
        "precision": "mixed-fp16",
    },
    "zero-3-fp16": {
        "strategy": "sharded",
        "devices": 2,
        "zero_stage": 3,
        "precision": "mixed-fp16",
    },
}
# Options the table shows beside the strategy, in this order.
SHOWN: tuple[str, ...] = ("devices", "ps", "schedule", "microbatches", "stages", "zero_stage")
SHOWN += ("recompute", "accumulate", "precision")
SHORT = {"microbatches": "M", "zero_stage": "stage", "ps": "ps"}


@dataclass(frozen=True)
class MemoryPlanSettings:
    models: tuple[str, ...] = tuple(MODELS)
    rows: tuple[str, ...] = tuple(ROWS)
    hidden: tuple[int, ...] = (512, 512)
    mlp_dataset: str = "synthetic"
    batch_size: int = 256
    steps: int = 3
    zero_devices: int = 4
    seed: int = 0


def configuration(settings: MemoryPlanSettings, name: str) -> dict[str, Any]:
    """The row ``name``'s strategy and options, its WIDE device count resolved.

    Examples
    --------
    >>> configuration(MemoryPlanSettings(zero_devices=2), "zero-3")
    {'strategy': 'sharded', 'devices': 2, 'zero_stage': 3}
    """
    row = dict(ROWS[name])
    if row.get("devices") == WIDE:
        row["devices"] = settings.zero_devices
    return row


def _model_options(settings: MemoryPlanSettings, model: str) -> dict[str, Any]:
    options = dict(MODELS[model])
    if model == "mlp":
        options.update(hidden=settings.hidden, dataset=settings.mlp_dataset)
    return options


def _device_row(predicted: DeviceMemory, measured: dict[str, Any] | None) -> dict[str, Any]:
    """One device's two peaks: the prediction's split at its worst moment beside the
    measured split at the measured peak, and each category's measured high-water."""
    entry: dict[str, Any] = {
        "predicted": predicted.total,
        "predicted_by_category": dict(predicted.by_category),
    }
    if measured is None:
        return {**entry, "measured": None, "error": None}
    peak = int(measured["peak_bytes"])
    return {
        **entry,
        "measured": peak,
        "measured_at_peak": {c: int(measured["at_peak"].get(c, 0)) for c in CATEGORIES},
        "measured_high_water": {c: int(measured["by_category"].get(c, 0)) for c in CATEGORIES},
        "measured_resident": {c: int(measured.get("resident", {}).get(c, 0)) for c in CATEGORIES},
        "error": predicted.total / peak - 1 if peak else None,
    }


def measure_row(settings: MemoryPlanSettings, model: str, name: str) -> dict[str, Any]:
    """Run the row ``name`` on ``model``; every device's predicted and measured peak."""
    row = configuration(settings, name)
    config = RunConfig(
        **_model_options(settings, model),
        **row,
        batch_size=settings.batch_size,
        steps=settings.steps,
        seed=settings.seed,
        device_type="cpu",
    )
    result = run_training(config, progress=lambda line: None)
    if result.prediction is None:
        raise SuiteFailed(f"{model} {name}: the run made no prediction")
    measured = result.summary["memory"]
    devices = {
        device: _device_row(memory, measured.get(device))
        for device, memory in result.prediction.memory_bytes.items()
    }
    errors = [entry["error"] for entry in devices.values()]
    worst = None if None in errors else max(errors, key=abs)
    return {
        "model": model,
        "row": name,
        **row,
        "devices_measured": devices,
        "error": worst,
        "within": worst is not None and abs(worst) <= CLOSE,
        "predicted_step_ms": result.summary.get("predicted_step_ms"),
        "measured_step_ms": result.summary.get("measured_step_ms"),
    }


def run_memory_plan_suite(settings: MemoryPlanSettings, progress: Progress) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    # One run store for the whole suite: a calibration is cached for the runs after it (the
    # memory prediction reads the costs only for model-parallel placement).
    with own_run_store():
        for model in settings.models:
            for name in settings.rows:
                progress(f"{model} {name}: {_options(configuration(settings, name))}")
                try:
                    row = measure_row(settings, model, name)
                except Exception as error:  # a row that cannot run is reported, not fatal
                    progress(f"  failed: {type(error).__name__}: {error}")
                    rows.append({"model": model, "row": name, "failed": f"{error}"})
                    continue
                if row["error"] is not None:
                    progress(f"  worst device {row['error']:+.1%}")
                rows.append(row)
    judged = [row for row in rows if "failed" not in row]
    share = sum(row["within"] for row in judged) / len(judged) if judged else None
    return {
        "suite": "memory-plan",
        "settings": asdict(settings),
        "rows": rows,
        "share_within_close": share,
        "share_met": None if share is None else share >= SHARE_CLOSE,
        "zero": _zero_verdicts(rows, settings.zero_devices),
        "recompute": _compare(rows, "mirrored-recompute", "mirrored"),
        "schedules": _compare(rows, "1f1b", "gpipe"),
    }


def _find(rows: list[dict[str, Any]], model: str, name: str) -> dict[str, Any] | None:
    """The row ``name`` of ``model`` if it ran and every device of it reported."""
    return next(
        (
            r
            for r in rows
            if r["model"] == model and r["row"] == name and r.get("error") is not None
        ),
        None,
    )


def _most(row: dict[str, Any], read: Callable[[dict[str, Any]], int]) -> int:
    """The largest of ``read(device entry)`` over the row's devices."""
    return max(read(entry) for entry in row["devices_measured"].values())


def _model_states(entry: dict[str, Any], key: str) -> int:
    split = entry[key]
    return int(split["parameters"] + split["optimizer"])


def _zero_verdicts(rows: list[dict[str, Any]], devices: int) -> list[dict[str, Any]]:
    """Per model and ZeRO stage, parameters + optimizer bytes per device over mirrored's on
    as many devices: the measured resident bytes (what a device held when a step began: see
    :func:`_resident`) and, beside them, the measured high-water (each category's own, summed;
    a stage 3 rank's gathered buckets included)."""
    verdicts = []
    for model in dict.fromkeys(r["model"] for r in rows):
        found = (_find(rows, model, name) for name in ("mirrored-wide", "mirrored"))
        base = next((r for r in found if r is not None and r["devices"] == devices), None)
        if base is None:
            continue
        base_high = _most(base, lambda e: _model_states(e, "measured_high_water"))
        base_resident = _most(base, _resident)
        for stage in (1, 2, 3):
            row = _find(rows, model, f"zero-{stage}")
            if row is None:
                continue
            high = _most(row, lambda e: _model_states(e, "measured_high_water"))
            resident = _most(row, _resident)
            verdicts.append(
                {
                    "model": model,
                    "zero_stage": stage,
                    "devices": row["devices"],
                    "high_water_bytes": high,
                    "mirrored_high_water_bytes": base_high,
                    "high_water_ratio": high / base_high,
                    "resident_bytes": resident,
                    "mirrored_resident_bytes": base_resident,
                    "resident_ratio": resident / base_resident,
                    "met": resident / base_resident <= ZERO_SHARE if stage == 3 else None,
                }
            )
    return verdicts


def _resident(entry: dict[str, Any]) -> int:
    """What a device kept between steps, measured: the parameters and optimizer state its
    ledger held when a step began (under ZeRO its shards; at stages 1 and 2 also the whole
    parameters, which it keeps)."""
    return _model_states(entry, "measured_resident")


def _compare(rows: list[dict[str, Any]], lower: str, higher: str) -> list[dict[str, Any]]:
    """Per model, the measured activation high-water (largest device) of ``lower`` beside
    ``higher``'s; met when ``lower``'s is below."""
    result = []
    for model in dict.fromkeys(r["model"] for r in rows):
        a, b = _find(rows, model, lower), _find(rows, model, higher)
        if a is None or b is None:
            continue
        first = _most(a, lambda e: e["measured_high_water"]["activations"])
        second = _most(b, lambda e: e["measured_high_water"]["activations"])
        result.append(
            {
                "model": model,
                lower: first,
                higher: second,
                "ratio": first / second if second else None,
                "met": first < second,
            }
        )
    return result


add_flags, run = settings_suite(
    MemoryPlanSettings,
    run_memory_plan_suite,
    ("steps", "hidden", "batch_size", "seed"),
    models=Flag(("--models", "--memory-plan-models"), "models to run", names_from(MODELS)),
    rows=Flag(("--rows",), "rows to run (names as in the table)", names_from(ROWS)),
    mlp_dataset=Flag(("--mlp-dataset",), "the MLP's data set", str),
    zero_devices=Flag(("--zero-devices",), "devices of the ZeRO rows and mirrored-wide", positive),
)


def _options(row: dict[str, Any]) -> str:
    return " ".join(
        f"{SHORT.get(key, key)}={row[key]}"
        for key in SHOWN
        if key in row and not (key == "devices" and row["strategy"] == "one-device")
    )


def _device_name(device: str) -> str:
    """``/job:worker/task:1/device:CPU:0`` as ``worker:1``."""
    found = re.match(r"/job:(\w+)/task:(\d+)", device)
    return f"{found[1]}:{found[2]}" if found else device


def _kib(nbytes: int | None) -> str:
    return "-" if nbytes is None else f"{nbytes / 1024:,.0f}"


def _shown(entry: dict[str, Any]) -> tuple[Any, ...]:
    """The figures a table line shows of a device."""
    keys = ("predicted", "measured", "predicted_by_category", "measured_at_peak")
    return tuple(str(entry.get(key)) for key in keys)


def _groups(devices: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Devices of one job showing the same figures as one line, named together
    (``worker:0-3``, ``worker:0,2``).

    Examples
    --------
    >>> same = {"predicted": 1, "measured": 1}
    >>> other = {"predicted": 2, "measured": 2}
    >>> devices = {f"/job:worker/task:{i}/device:CPU:0": e
    ...            for i, e in enumerate([same, other, same, other])}
    >>> [name for name, _ in _groups(devices)]
    ['worker:0,2', 'worker:1,3']
    """
    groups: dict[tuple[str, tuple[Any, ...]], tuple[list[int], dict[str, Any]]] = {}
    for device, entry in devices.items():
        job, _, task = _device_name(device).partition(":")
        key = (job, _shown(entry))
        groups.setdefault(key, ([], entry))[0].append(int(task) if task.isdigit() else -1)
    lines = []
    for (job, _), (tasks, entry) in groups.items():
        consecutive = tasks == list(range(tasks[0], tasks[0] + len(tasks)))
        if len(tasks) > 1 and consecutive:
            named = f"{tasks[0]}-{tasks[-1]}"
        else:
            named = ",".join(map(str, tasks))
        lines.append((f"{job}:{named}", entry))
    return lines


def _split(entry: dict[str, Any], category: str) -> str:
    predicted = entry["predicted_by_category"][category]
    measured = (entry.get("measured_at_peak") or {}).get(category)
    return f"{_kib(predicted)} / {_kib(measured)}"


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    lines = []
    for row in result["rows"]:
        if "failed" in row:
            lines.append((row["model"], row["row"], "", "failed", "", "", *[""] * 5))
            continue
        for name, entry in _groups(row["devices_measured"]):
            error = entry["error"]
            mark = "" if error is not None and abs(error) <= CLOSE else " (>10%)"
            lines.append(
                (
                    row["model"],
                    f"{row['strategy']} {_options(row)}".strip(),
                    name,
                    _kib(entry["predicted"]),
                    _kib(entry["measured"]),
                    "-" if error is None else f"{error:+.1%}{mark}",
                    *(_split(entry, category) for category in CATEGORIES),
                )
            )
    columns: tuple[str, ...] = ("model", "configuration", "device", "predicted KiB")
    columns += ("measured KiB", "error", *(f"{c} KiB (pred / meas)" for c in CATEGORIES))
    share = result["share_within_close"]
    named = {
        "mlp": f"mlp --hidden {widths(settings['hidden'])} on {settings['mlp_dataset']}",
        "transformer": "transformer on digits",
    }
    models = [named[model] for model in settings["models"]]
    out = [
        f"### memory-plan: predicted vs measured peak per device: {', '.join(models)}; global "
        f"batch {settings['batch_size']}, {settings['steps']} steps",
        "",
        *table(columns, "lllrrr" + "r" * len(CATEGORIES), lines),
        "",
        "- within 10% on every device: "
        + ("no rows ran" if share is None else f"{share:.0%} of the rows")
        + f" (target 90%): {verdict(result['share_met'], 'unjudged')}",
    ]
    for zero in result["zero"]:
        out.append(
            f"- {zero['model']} sharded stage {zero['zero_stage']} on {zero['devices']} devices, "
            f"parameters + optimizer per device / mirrored's: measured resident shards "
            f"{zero['resident_ratio']:.2f}, measured high-water {zero['high_water_ratio']:.2f}"
            + (
                f" (target <= {ZERO_SHARE} resident): {verdict(zero['met'])}"
                if zero["met"] is not None
                else ""
            )
        )
    for found in result["recompute"]:
        out.append(
            f"- {found['model']} mirrored activation high-water, recompute full / none: "
            f"{_kib(found['mirrored-recompute'])} / {_kib(found['mirrored'])} KiB: "
            f"{verdict(found['met'])}"
        )
    for found in result["schedules"]:
        out.append(
            f"- {found['model']} pipeline activation high-water at M={MICROBATCHES}, 1F1B / "
            f"GPipe: {_kib(found['1f1b'])} / {_kib(found['gpipe'])} KiB: "
            f"{verdict(found['met'])}"
        )
    return "\n".join(out)
