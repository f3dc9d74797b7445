"""The ``placement`` suite: model parallelism placed by the greedy cost model against the
parameter-count split, on models with very unequal layer costs.

For each model, each placement trains on 2 devices (float32, momentum), ``run_training``
exactly as ``dtrain run --strategy model-parallel --placement P`` does, alternating (greedy,
balanced, balanced, greedy, ...) for ``repeats`` trials each. A trial's step time is the
summary's global batch over its steady samples/s. Each run starts from an empty run store,
so it measures its own costs, as a first run on a cluster does (a cached calibration would
let one noisy measurement decide every trial). The target, per model: greedy's median step
at least 10% below balanced-params'.

Why greedy wins. Within a step, the only work two devices can do at once is a layer's weight
gradient beside the input gradient (and the rest of the backward pass) that does not need it.
The parameter split cannot use it: it cuts the layer chain where the parameters balance, and
each layer's gradients follow their forward nodes, so a device runs its layers' input and
weight gradients back to back while the other waits.

- MLP 784-256-2048-2048-256-10 on ``synthetic``, batch 512: ``dense_2`` (2048 x 2048, 4.2M
  parameters, 2.1 GFLOP a pass) is 8-16 times any other layer. The split cuts after
  ``dense_1``: the 2048-wide activation (4 MiB) crosses forward and its gradient (4 MiB) back,
  and the second device runs ``dense_2``'s forward, input gradient and weight gradient one
  after another (about three quarters of the step) while the first waits. Greedy keeps the
  forward pass on one device (nothing there can run in parallel) and runs ``dense_2``'s
  weight gradient on the other, beside the input gradient and the rest of the backward pass,
  paying with the layer's input and output gradient going over (4 MiB each) and the 16 MiB
  weight gradient coming back to its update.
- CNN on ``digits``, batch 256: the convolutions hold 12% of the parameters and most of the
  work, so the split gives the first device every convolution (cut at the flatten, 1 MiB)
  and the second the dense layers (under a tenth of the step). Greedy runs the second
  convolution's filter gradient and the dense weight gradients on the second device beside
  the input gradients and the max-pool gradient.

``dtrain plan --strategy model-parallel ... --placement P`` shows it: each device's predicted
busy time, how much of the step the devices compute at the same time, which layers' backward
runs on two devices, and every Send/Recv pair's bytes and milliseconds.

The MLP's gain grows with the batch: the weight gradient's trip back is fixed (16 MiB), the
work it takes off the critical path grows with the rows. Where the heavy work is the first
and last thing a step does, little can run beside it: on MLP 784-4096-64-64-10 (``dense_0``'s
forward and weight gradient are most of the step) greedy gains less than 10%, mostly the 4 MiB
activation and gradient the split sends.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, replace
from typing import Any

from benchmarks.distributed_suites import own_run_store, spread
from benchmarks.flags import add_settings_flags, names_from, positive, positive_list, settings_from
from benchmarks.report import span, table, verdict, widths
from benchmarks.suite import Progress
from workbench.config import RunConfig
from workbench.data import load_dataset
from workbench.launch.graph_plans import graph_plan
from workbench.launch.runner import run_training
from workbench.models import build_model
from workbench.strategies import validate_config

TARGET_RATIO = 0.9  # greedy's median step over balanced-params'
PLACEMENTS = ("greedy", "balanced-params")


@dataclass(frozen=True)
class Case:
    """A model to place: a preset, its data set, hidden widths (the MLP's) and batch."""

    model: str
    dataset: str
    hidden: tuple[int, ...]
    batch_size: int

    @property
    def label(self) -> str:
        if self.model == "mlp":
            return (
                f"MLP {','.join(map(str, self.hidden))} on {self.dataset}, batch {self.batch_size}"
            )
        return f"{self.model.upper()} on {self.dataset}, batch {self.batch_size}"


MLP = Case("mlp", "synthetic", (256, 2048, 2048, 256), 512)
CNN = Case("cnn", "digits", (), 256)


@dataclass(frozen=True)
class PlacementSettings:
    cases: tuple[Case, ...] = (MLP, CNN)
    devices: int = 2
    steps: int = 150
    repeats: int = 3
    seed: int = 0


def _config(settings: PlacementSettings, case: Case, placement: str) -> RunConfig:
    # Validated as dtrain run's flags are: the plan below reads the strategy's typed options.
    return validate_config(
        RunConfig(
            strategy="model-parallel",
            devices=settings.devices,
            placement=placement,
            model=case.model,
            dataset=case.dataset,
            hidden=case.hidden or RunConfig().hidden,  # the CNN has no hidden widths
            batch_size=case.batch_size,
            steps=settings.steps,
            lr_decay="none",
            dtype="float32",
            device_type="cpu",
            seed=settings.seed,
        )
    )


def _trial(settings: PlacementSettings, case: Case, placement: str) -> dict[str, Any]:
    config = _config(settings, case, placement)
    with own_run_store():
        summary = run_training(config, progress=lambda line: None).summary
        # The plan the run used: built from the calibration the run just cached.
        data = load_dataset(config.dataset, seed=config.seed)
        model = build_model(config.model, data.input_shape, data.num_classes, config.hidden)
        plan = graph_plan(config, model)
    prediction = plan.prediction
    largest = sorted(plan.partitioned.transfers, key=lambda t: -t.nbytes)[:3]
    sent = sum(device["bytes_sent"] for device in summary["per_device"])
    return {
        "placement": placement,
        "step_ms": 1e3 * summary["global_batch_size"] / summary["samples_per_second"],
        "samples_per_second": summary["samples_per_second"],
        "bytes_sent_per_step": sent / summary["steps"],
        "final_loss": summary["final_loss"],
        "predicted_step_ms": 1e3 * prediction.schedule.seconds,
        "predicted_busy_ms": {d: 1e3 * s for d, s in prediction.schedule.busy.items()},
        "send_recv_pairs": len(plan.partitioned.transfers),
        "largest_transfers": [
            {
                "key": t.key,
                "bytes": t.nbytes,
                "predicted_ms": 1e3 * prediction.transfer_seconds[t.key],
            }
            for t in largest
        ],
    }


def _compare(settings: PlacementSettings, case: Case, progress: Progress) -> dict[str, Any]:
    trials = []
    for index in range(settings.repeats):
        # Alternating, and each pair in the other order: greedy, balanced, balanced, greedy.
        order = PLACEMENTS if index % 2 == 0 else PLACEMENTS[::-1]
        for placement in order:
            progress(f"{case.label}, {placement}: trial {index + 1}/{settings.repeats}")
            trials.append({"trial": index, **_trial(settings, case, placement)})
            row = trials[-1]
            progress(
                f"  {row['step_ms']:.2f} ms/step (predicted {row['predicted_step_ms']:.2f}), "
                f"{row['send_recv_pairs']} Send/Recv pairs"
            )
    rows: list[dict[str, Any]] = []
    for placement in PLACEMENTS:
        mine = [trial for trial in trials if trial["placement"] == placement]
        rows.append(
            {
                "placement": placement,
                "step_ms": spread([t["step_ms"] for t in mine]),
                "samples_per_second": spread([t["samples_per_second"] for t in mine]),
                "predicted_step_ms": spread([t["predicted_step_ms"] for t in mine]),
                "bytes_sent_per_step": spread([t["bytes_sent_per_step"] for t in mine]),
                "send_recv_pairs": spread([t["send_recv_pairs"] for t in mine]),
            }
        )
    greedy, balanced = rows
    ratio = greedy["step_ms"]["median"] / balanced["step_ms"]["median"]
    per_trial = [
        g["step_ms"] / b["step_ms"]
        for g, b in zip(
            [t for t in trials if t["placement"] == "greedy"],
            [t for t in trials if t["placement"] == "balanced-params"],
        )
    ]
    return {
        "case": {**asdict(case), "label": case.label},
        "rows": rows,
        "trials": trials,
        "ratio": {**spread(per_trial), "of_medians": ratio},
        "met": ratio <= TARGET_RATIO,
    }


def run_placement_suite(settings: PlacementSettings, progress: Progress) -> dict[str, Any]:
    cases = [_compare(settings, case, progress) for case in settings.cases]
    return {
        "suite": "placement",
        "settings": {**asdict(settings), "dtype": "float32", "optimizer": "momentum"},
        "target_ratio": TARGET_RATIO,
        "cases": cases,
        "met": all(case["met"] for case in cases),
    }


def add_flags(parser: argparse.ArgumentParser) -> None:
    add_settings_flags(parser, PlacementSettings(), ("steps", "repeats", "seed"))
    parser.add_argument(
        "--hidden",
        "--placement-hidden",
        type=positive_list,
        default=MLP.hidden,
        help=f"the MLP's hidden layers ({widths(MLP.hidden)})",
    )
    parser.add_argument(
        "--batch-size",
        "--placement-batch",
        type=positive,
        default=None,
        help=f"global batch (MLP {MLP.batch_size}, CNN {CNN.batch_size})",
    )
    parser.add_argument(
        "--models",
        "--placement-models",
        type=names_from(("mlp", "cnn")),
        default=("mlp", "cnn"),
        help="which models, of mlp,cnn (both)",
    )


def run(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    chosen = {
        "mlp": Case("mlp", MLP.dataset, args.hidden, args.batch_size or MLP.batch_size),
        "cnn": Case("cnn", CNN.dataset, (), args.batch_size or CNN.batch_size),
    }
    settings = settings_from(PlacementSettings, args)
    return run_placement_suite(
        replace(settings, cases=tuple(chosen[name] for name in args.models)), progress
    )


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    rows = [
        (
            case["case"]["label"],
            row["placement"],
            f"{row['step_ms']['median']:.2f}",
            span(row["step_ms"]),
            f"{row['predicted_step_ms']['median']:.2f}",
            f"{row['send_recv_pairs']['median']:.0f}",
            f"{row['bytes_sent_per_step']['median']:,.0f}",
        )
        for case in result["cases"]
        for row in case["rows"]
    ]
    columns = ("model", "--placement", "ms/step (median)", "min - max", "predicted ms/step")
    lines = [
        f"### placement: model-parallel on {settings['devices']} devices, --placement greedy "
        "vs balanced-params",
        "",
        *table((*columns, "Send/Recv pairs", "bytes sent/step"), "llrrrrr", rows),
        "",
    ]
    for case in result["cases"]:
        ratio = case["ratio"]
        lines.append(
            f"- {case['case']['label']}: greedy / balanced-params step time "
            f"**{ratio['of_medians']:.3f}** (medians; per trial pair {span(ratio, 3)}); "
            f"target <= {result['target_ratio']:g}: {verdict(case['met'])}"
        )
        for trial in case["trials"][:2]:
            moved = ", ".join(
                f"{t['key'].split('->')[0]} {t['bytes']:,} B ({t['predicted_ms']:.2f} ms)"
                for t in trial["largest_transfers"]
            )
            lines.append(f"  - largest Send/Recv pairs, {trial['placement']}: {moved or 'none'}")
    lines.append(
        f"- method: {settings['repeats']} trials of {settings['steps']} steps per placement, "
        "alternating; step time = global batch / the summary's steady samples/s; each run "
        "measures its own costs (an empty run store); predictions from the plan the run used"
    )
    return "\n".join(lines)
