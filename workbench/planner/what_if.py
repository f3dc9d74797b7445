"""The what-if table: every strategy and its main options predicted for one model, batch and
cluster, ranked, with the reason each loses to the best.

A row's step is split into parts that add up to it: compute (the busiest device's compute and
update), the pipeline's bubble (its idle share of the step, up to what compute leaves),
communication (the rest of the simulated step: waiting on transfers and collectives) and
overhead (what a step pays outside its programs). A row loses to the fastest by its step's gap,
broken down part by part: every part whose difference shows at 0.01 ms, signed, so a part it
gains on (a pipeline's communication) offsets one it loses on (its compute) and the listed
differences add up to the gap. A row whose devices would need more memory than they have
(its largest device's predicted peak above the capacity given) loses to memory whatever its
speed: it is marked, ranked after every row that fits, and its reason says how much it needs.
Each ranked row also says what it loses to the row above it (``versus_above``).

Beside the strategies' own rows, the mesh search (:mod:`workbench.planner.mesh_search`) adds a
row for every ``dp x tp x pp`` mesh, schedule, micro-batch count and virtual stage count worth
predicting; a mesh row's step also shows its tensor group's and its data group's all-reduces
as parts of their own (docs/guide/planning.md, "Searching the mesh").

:func:`describe_options` names a row's configuration for every view (the CLI's table, the
notebook's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from workbench.config import ConfigError, RunConfig
from workbench.models import Sequential
from workbench.optim import Optimizer
from workbench.parallel.pipeline.schedules import ScheduleError
from workbench.parallel.pipeline.stages import StageError
from workbench.passes.tensor_split import SplitError
from workbench.planner.device_costs import DeviceCosts
from workbench.planner.mesh_predict import predict_mesh
from workbench.planner.mesh_search import PrunedMesh, mesh_space
from workbench.planner.mesh_step import DATA, TENSOR, MeshCosting
from workbench.planner.predict import PlanningError, Prediction, predict
from workbench.planner.strategy_planning import MICROBATCH_CHOICES, planning_of
from workbench.strategies import STRATEGIES, validate_config

PARTS = ("compute", "communication", TENSOR, DATA, "bubble", "overhead")
# The run options that shape every strategy's step and memory alike hold for every row.
SHARED_FIELDS = ("model", "hidden", "dataset", "batch_size", "optimizer", "dtype", "seed")
RUN_OPTIONS = ("precision", "recompute", "accumulate")
MESH = "mesh"


@dataclass(frozen=True)
class WhatIfRow:
    strategy: str
    options: dict
    prediction: Prediction | None
    parts: dict[str, float]
    reason: str  # "fastest", or what it loses to the fastest by; or why it cannot run
    fits: bool = True
    # Its step's gap to the fastest, part by part, in milliseconds as printed (adding up to
    # the printed gap); empty for the fastest and rows not ranked against it.
    behind_ms: dict[str, float] = field(default_factory=dict)
    rank: int | None = None  # 1 for the fastest; None for rows not predicted
    # What it loses to the row ranked just above it ("" for the first and unranked rows).
    versus_above: str = ""

    @property
    def step_seconds(self) -> float | None:
        return self.prediction.step_seconds if self.prediction else None

    def to_dict(self) -> dict:
        prediction = self.prediction
        if prediction is None:
            return {
                "strategy": self.strategy,
                **self.options,
                "rank": None,
                "predicted_step_ms": None,
                "reason": self.reason,
            }
        devices = prediction.devices
        largest, peak = prediction.largest_memory()
        return {
            "strategy": self.strategy,
            **self.options,
            "rank": self.rank,
            "predicted_step_ms": round(prediction.step_seconds * 1e3, 4),
            "samples_per_second": round(prediction.samples_per_second, 1),
            "bytes_per_device": max(prediction.bytes_sent(d) for d in devices),
            "memory_per_device": peak.total,
            "memory_device": largest,
            "memory_by_category": dict(peak.by_category),
            "memory_by_device": {
                device: memory.total for device, memory in prediction.memory_bytes.items()
            },
            "fits": self.fits,
            "bubble": None if prediction.bubble is None else round(prediction.bubble, 4),
            **{f"{_key(part)}_ms": round(seconds * 1e3, 4) for part, seconds in self.parts.items()},
            "reason": self.reason,
            "loses_by_ms": {_key(part): ms for part, ms in self.behind_ms.items()} or None,
            "versus_above": self.versus_above or None,
        }


def _key(part: str) -> str:
    """A part's name as a JSON key: ``tensor all-reduce`` -> ``tensor_allreduce``."""
    return part.replace(" ", "_").replace("-", "")


def candidate_configs(base: RunConfig, devices: int) -> Iterator[RunConfig]:
    """``base``'s model and batch under each predicted strategy and its main options on
    ``devices`` devices, as each strategy's planning offers them, in the registry's order
    (configurations the strategies refuse, say a batch the replicas cannot split, are left
    out later, or listed with the reason)."""
    common = _common(base)
    for name in STRATEGIES.names():
        planning = planning_of(name)
        if planning is not None:
            yield from planning.candidates(name, dict(common), devices)


def _common(base: RunConfig) -> dict:
    """The fields every row shares with ``base`` (model, batch, run options)."""
    return {name: getattr(base, name) for name in (*SHARED_FIELDS, *RUN_OPTIONS)}


def _options(config: RunConfig) -> dict:
    shown = {"devices": config.devices}
    shown.update({k: v for k, v in config.options.items() if k in _SHOWN_OPTIONS})
    if config.options.get("schedule") != "interleaved-1f1b":
        shown.pop("virtual_stages", None)  # read by interleaved 1F1B alone
    if config.strategy == MESH and str(config.options.get("mesh", "")).endswith("pp=1"):
        # One stage: no pipeline, so no schedule to name.
        shown.pop("microbatches", None)
        shown.pop("schedule", None)
    return shown


def describe_options(options: Mapping[str, object]) -> str:
    """A row's configuration as every view shows it: each option it sets, in its order.

    Examples
    --------
    >>> describe_options({"devices": 2, "allreduce": "ring", "compression": "topk:0.01"})
    'devices=2 allreduce=ring compression=topk:0.01'
    """
    return " ".join(f"{key}={value}" for key, value in options.items())


_SHOWN_OPTIONS = (
    "allreduce",
    "mesh",
    "compression",
    "ps",
    "mode",
    "stages",
    "microbatches",
    "schedule",
    "virtual_stages",
    "zero_stage",
)


def step_parts(prediction: Prediction) -> dict[str, float]:
    """The step split into :data:`PARTS`, which add up to ``prediction.step_seconds``."""
    makespan = prediction.makespan
    compute = min(max(prediction.busy(device) for device in prediction.devices), makespan)
    # The bubble is the stages' mean idle share, which beside the busiest stage's compute can
    # exceed the step: capped at what compute leaves.
    bubble = min((prediction.bubble or 0.0) * makespan, makespan - compute)
    return {
        "compute": compute,
        "communication": makespan - compute - bubble,
        "bubble": bubble,
        "overhead": prediction.step_seconds - makespan,
    }


def gap_by_part(parts: Mapping[str, float], best: Mapping[str, float]) -> dict[str, float]:
    """``parts`` minus ``best``'s, in milliseconds to 0.01, rounded so that they add up to the
    rounded gap between the two steps (the part rounded furthest takes the remainder); parts
    whose difference rounds to zero are left out, the largest loss first.

    Examples
    --------
    >>> gap_by_part({"compute": 0.01777, "communication": 0.0}, {"compute": 0.01477,
    ...             "communication": 0.0028})
    {'compute': 3.0, 'communication': -2.8}
    """
    exact = {
        part: (parts.get(part, 0.0) - best.get(part, 0.0)) * 1e3
        for part in PARTS
        if part in parts or part in best
    }
    rounded = {part: round(delta, 2) for part, delta in exact.items()}
    remainder = round(round(sum(exact.values()), 2) - sum(rounded.values()), 2)
    if remainder:
        furthest = max(exact, key=lambda part: abs(exact[part] - rounded[part]))
        rounded[furthest] = round(rounded[furthest] + remainder, 2)
    kept = {part: delta for part, delta in rounded.items() if delta != 0.0}
    return dict(sorted(kept.items(), key=lambda item: -item[1]))


def loses_by(gap_ms: float, behind_ms: Mapping[str, float]) -> str:
    """The reason a row loses to the fastest: its gap, then the parts that make it up.

    Examples
    --------
    >>> loses_by(0.2, {"compute": 3.0, "communication": -2.8})
    '+0.20 ms: compute +3.00, communication -2.80'
    """
    parts = ", ".join(f"{part} {delta:+.2f}" for part, delta in behind_ms.items())
    return f"+{gap_ms:.2f} ms" + (f": {parts}" if parts else "")


def what_if(
    base: RunConfig,
    model: Sequential,
    optimizer: Optimizer,
    costs: DeviceCosts,
    devices: int,
    device_names: Sequence[str] | None = None,
    memory_capacity: int | None = None,
    costs_for: Callable[[RunConfig], DeviceCosts] | None = None,
) -> list[WhatIfRow]:
    """Every candidate configuration predicted and ranked (fastest first; configurations that
    do not fit in memory or cannot be predicted last). ``costs_for``: each configuration's
    costs, where they are not ``costs`` for all (the calibration a run of it reads)."""
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
            # As many as the strategy names (parameter servers: the workers and their tasks).
            count = len(STRATEGIES[config.strategy].planned_device_names(config))
            names = list(device_names[: min(count, devices)])
            # Parameter-server tasks beyond the described devices: processes of their own
            # (on hosts of their own, so reached over the inter-host links).
            names += [f"ps{task}" for task in range(count - len(names))]
        try:
            row_costs = costs if costs_for is None else costs_for(config)
            prediction = predict(config, model, optimizer, row_costs, names)
        except PlanningError as error:
            rows.append(WhatIfRow(config.strategy, _options(config), None, {}, str(error), False))
            continue
        fits = memory_capacity is None or prediction.largest_memory()[1].total <= memory_capacity
        rows.append(
            WhatIfRow(
                config.strategy, _options(config), prediction, step_parts(prediction), "", fits
            )
        )
    rows += mesh_rows(base, model, optimizer, costs, devices, device_names, costs_for)
    return rank_rows(rows, memory_capacity)


def mesh_rows(
    base: RunConfig,
    model: Sequential,
    optimizer: Optimizer,
    costs: DeviceCosts,
    devices: int,
    device_names: Sequence[str] | None = None,
    costs_for: Callable[[RunConfig], DeviceCosts] | None = None,
) -> list[WhatIfRow]:
    """A row for every configuration of the mesh search (:func:`mesh_space`) on ``devices``
    devices, unranked. A described cluster keeps tensor groups inside its hosts; the stage
    graphs and rings of every row are costed once (:class:`MeshCosting`)."""
    if MESH not in STRATEGIES.names() or devices < 2:
        return []
    per_host = costs.cluster.devices_per_host if costs.cluster is not None else None
    space = mesh_space(model, base.batch_size, devices, per_host)
    costings: dict[int, MeshCosting] = {}
    rows = []
    for candidate in space.candidates:
        try:
            config = validate_config(
                RunConfig(strategy=MESH, devices=devices, **_common(base), **candidate.options())
            )
        except ConfigError:
            continue  # what the mesh refuses beyond the search's own pruning
        row_costs = costs if costs_for is None else costs_for(config)
        costing = costings.get(id(row_costs))
        if costing is None:
            costing = costings[id(row_costs)] = MeshCosting(
                model, optimizer, base.dtype, row_costs, base.recompute
            )
        names = device_names
        if names is None:
            kind = "gpu" if config.device_type == "gpu" else "cpu"
            names = STRATEGIES[MESH].device_names(config, kind)
        try:
            prediction, parts = predict_mesh(config, costing, names[:devices])
        except (ConfigError, StageError, ScheduleError, SplitError) as error:
            # What the model's graphs refuse past the search's pruning: listed with why.
            rows.append(WhatIfRow(MESH, _options(config), None, {}, str(error), False))
            continue
        rows.append(WhatIfRow(MESH, _options(config), prediction, parts, ""))
    return rows


def rank_rows(rows: list[WhatIfRow], memory_capacity: int | None = None) -> list[WhatIfRow]:
    """Fastest first, each row's reason against the fastest that fits and what it loses to
    the row above it; rows without a prediction last. ``memory_capacity``: each device's
    bytes, where rows are (re)judged against it (rows keep their own judgement otherwise)."""
    if memory_capacity is not None:
        rows = [
            replace(row, fits=row.prediction.largest_memory()[1].total <= memory_capacity)
            if row.prediction is not None
            else row
            for row in rows
        ]
    predicted = sorted(
        (row for row in rows if row.prediction is not None),
        key=lambda row: (not row.fits, row.step_seconds),
    )
    best = next((row for row in predicted if row.fits), None)
    ranked: list[WhatIfRow] = []
    for rank, row in enumerate(predicted, start=1):
        behind: dict[str, float] = {}
        if not row.fits:
            reason = _memory_reason(row, memory_capacity)
        elif row is best:
            reason = "fastest"
        else:
            assert best is not None
            behind = gap_by_part(row.parts, best.parts)
            reason = loses_by(_gap_ms(row, best), behind)
        above = ranked[-1] if ranked else None
        versus = ""
        if above is not None:
            versus = (
                _memory_reason(row, memory_capacity)
                if not row.fits and above.fits
                else loses_by(_gap_ms(row, above), gap_by_part(row.parts, above.parts))
            )
        ranked.append(replace(row, reason=reason, behind_ms=behind, rank=rank, versus_above=versus))
    return ranked + [row for row in rows if row.prediction is None]


def _gap_ms(row: WhatIfRow, ahead: WhatIfRow) -> float:
    assert row.step_seconds is not None and ahead.step_seconds is not None
    return round((row.step_seconds - ahead.step_seconds) * 1e3, 2)


def _memory_reason(row: WhatIfRow, memory_capacity: int | None) -> str:
    assert row.prediction is not None
    device, peak = row.prediction.largest_memory()
    has = "a device has" if memory_capacity is None else f"{megabytes(memory_capacity)} MB"
    return f"memory: needs {megabytes(peak.total)} MB on {device}, more than {has}"


def top_rows(rows: Sequence[WhatIfRow], top: int | None) -> list[WhatIfRow]:
    """The ``top`` best ranked rows (``--what-if-top``); every row when ``top`` is None.

    Examples
    --------
    >>> top_rows([], 3)
    []
    """
    if top is None:
        return list(rows)
    return [row for row in rows if row.rank is not None and row.rank <= top]


def megabytes(nbytes: int) -> str:
    """Bytes as the table prints them: decimal megabytes, with three significant digits
    below 100 MB (so small models' rows differ) and one decimal above.

    Examples
    --------
    >>> [megabytes(n) for n in (56_740, 1_234_567, 17_179_869_184)]
    ['0.0567', '1.23', '17179.9']
    """
    value = nbytes / 1e6
    digits = 1 if value >= 10 else 2 if value >= 1 else 3 if value >= 0.1 else 4
    return f"{value:.{digits}f}"


def format_table(rows: Sequence[WhatIfRow]) -> str:
    """The table ``dtrain plan --what-if`` prints, each column as wide as its widest cell;
    where some row does not fit in memory, a ``fits`` column marks it ``NO``."""
    marked = any(not row.fits for row in rows if row.prediction is not None)
    header = ["strategy", "options", "step ms", "samples/s", "MB sent/dev", "peak MB/dev"]
    header += ["peak on", *(["fits"] if marked else []), "bubble", "reason"]
    lines = [header]
    for row in rows:
        data = row.to_dict()
        cells = [row.strategy, describe_options(row.options)]
        if row.prediction is None:
            lines.append([*cells, "-", *[""] * (len(header) - 4), row.reason])
            continue
        lines.append(
            [
                *cells,
                f"{data['predicted_step_ms']:.2f}",
                f"{data['samples_per_second']:,.0f}",
                f"{data['bytes_per_device'] / 1e6:.2f}",
                megabytes(data["memory_per_device"]),
                data["memory_device"],
                *(["yes" if row.fits else "NO"] if marked else []),
                "-" if data["bubble"] is None else f"{data['bubble']:.2f}",
                row.reason,
            ]
        )
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    text = []
    for line in lines:
        cells = [
            cell.ljust(width) if column < 2 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(line[:-1], widths))
        ]
        text.append(("  ".join(cells) + "  " + line[-1]).rstrip())
    return "\n".join(text)


def memory_summary(rows: Sequence[WhatIfRow], capacity: int | None) -> str:
    """The line beside the table: what its memory columns say and, given a ``capacity`` in
    bytes per device, how many predicted rows fit in it (the others marked in ``fits``).

    Examples
    --------
    >>> print(memory_summary([], None))
    peak MB/dev: the largest device's predicted peak memory (peak on: which device)
    """
    legend = "peak MB/dev: the largest device's predicted peak memory (peak on: which device)"
    if capacity is None:
        return legend
    predicted = [row for row in rows if row.prediction is not None]
    fitting = sum(row.fits for row in predicted)
    marks = "" if fitting == len(predicted) else " (fits NO: needs more, ranked last)"
    return (
        f"{legend}; {fitting} of {len(predicted)} configurations fit in "
        f"{megabytes(capacity)} MB per device{marks}"
    )


def left_out_summary(
    rows: Sequence[WhatIfRow], shown: Sequence[WhatIfRow], pruned: Sequence[PrunedMesh]
) -> str:
    """The line under the table: how many ranked rows ``--what-if-top`` hides and how many
    meshes the search left out (``--json`` lists each with its reason).

    Examples
    --------
    >>> left_out_summary([], [], [])
    'meshes: none left out'
    """
    ranked = sum(row.rank is not None for row in rows)
    hidden = ranked - sum(row.rank is not None for row in shown)
    parts = [f"showing the best {ranked - hidden} of {ranked} ranked"] if hidden else []
    if pruned:
        kinds = Counter(p.kind for p in pruned)
        counted = ", ".join(f"{count} {kind}" for kind, count in kinds.most_common())
        parts.append(f"meshes: {len(pruned)} left out ({counted}; --json gives each reason)")
    else:
        parts.append("meshes: none left out")
    return "; ".join(parts)
