"""The ``placement`` suite: model parallelism placed by the greedy cost model against the
parameter-count split, on a model with very unequal layer costs.

Each placement trains the MLP 784-256-2048-2048-256-10 on ``synthetic`` (batch 512, float32,
momentum) on 2 devices, ``run_training`` exactly as ``dtrain run --strategy model-parallel
--placement P`` does, alternating (greedy, balanced, balanced, greedy, ...) for ``repeats``
trials each. A trial's step time is the summary's global batch over its steady samples/s.
Each run starts from an empty run store, so it measures its own costs, as a first run on a
cluster does (a cached calibration would let one noisy measurement decide every trial). The
target: greedy's median step at least 10% below balanced-params'.

Why greedy wins. ``dense_2`` (2048 x 2048, 4.2M parameters, 2.1 GFLOP a pass at batch 512)
is 8-16 times any other layer. The parameter split balances parameters, so it cuts after
``dense_1``: the 2048-wide activation (4 MiB) crosses forward and its gradient (4 MiB) crosses
back, and the second device gets ``dense_2`` with the small tail. Its gradients follow their
forward nodes, so that device runs ``dense_2``'s forward, its input gradient and its weight
gradient back to back (about three quarters of the step) while the first device waits for
it: the two devices overlap only while the first runs its two small layers' backward.
Greedy keeps the forward pass on one device (nothing there runs in parallel) and sends
``dense_2``'s weight gradient to the other device, where it runs beside the input gradient
and the rest of the backward pass; it pays for that with the layer's input activation and
output gradient going over (4 MiB each) and the 16 MiB weight gradient coming back to its
update. ``dtrain plan --strategy model-parallel --hidden 256,2048,2048,256 --dataset
synthetic --batch-size 512 --placement P`` shows both: each device's predicted busy time,
how much of the step they compute at the same time, and every Send/Recv pair's bytes and
milliseconds.

The gain grows with the batch: the weight gradient's trip back is fixed (16 MiB), the work
it takes off the critical path grows with the rows. On models whose costs sit where nothing
can run beside them, greedy gains little or nothing: MLP 784-4096-64-64-10 spends most of
its step in ``dense_0``'s forward and weight gradient, the first and last things the step
does, and the parameter split only adds one 4 MiB activation and its gradient.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from workbench.bench.distributed_suites import Progress, spread
from workbench.config import RunConfig
from workbench.data import load_dataset
from workbench.launch.graph_plans import graph_plan
from workbench.launch.runner import run_training
from workbench.models import build_model
from workbench.store import STORE_ENVIRONMENT

TARGET_RATIO = 0.9  # greedy's median step over balanced-params'
PLACEMENTS = ("greedy", "balanced-params")


@dataclass(frozen=True)
class PlacementSettings:
    devices: int = 2
    dataset: str = "synthetic"
    hidden: tuple[int, ...] = (256, 2048, 2048, 256)
    batch_size: int = 512
    steps: int = 150
    repeats: int = 3
    seed: int = 0


@contextmanager
def _empty_store() -> Iterator[None]:
    """A run store of its own for one run: its calibration is measured afresh."""
    before = os.environ.get(STORE_ENVIRONMENT)
    with tempfile.TemporaryDirectory(prefix="dtrain-bench-placement-") as root:
        os.environ[STORE_ENVIRONMENT] = root
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(STORE_ENVIRONMENT, None)
            else:
                os.environ[STORE_ENVIRONMENT] = before


def _config(settings: PlacementSettings, placement: str) -> RunConfig:
    return RunConfig(
        strategy="model-parallel",
        devices=settings.devices,
        placement=placement,
        dataset=settings.dataset,
        hidden=settings.hidden,
        batch_size=settings.batch_size,
        steps=settings.steps,
        lr_decay="none",
        dtype="float32",
        device_type="cpu",
        seed=settings.seed,
    )


def _trial(settings: PlacementSettings, placement: str) -> dict[str, Any]:
    config = _config(settings, placement)
    with _empty_store():
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


def run_placement_suite(settings: PlacementSettings, progress: Progress) -> dict[str, Any]:
    trials = []
    for index in range(settings.repeats):
        # Alternating, and each pair in the other order: greedy, balanced, balanced, greedy.
        order = PLACEMENTS if index % 2 == 0 else PLACEMENTS[::-1]
        for placement in order:
            progress(f"{placement}: trial {index + 1}/{settings.repeats}, {settings.steps} steps")
            trials.append({"trial": index, **_trial(settings, placement)})
            row = trials[-1]
            progress(
                f"  {row['step_ms']:.2f} ms/step (predicted {row['predicted_step_ms']:.2f}), "
                f"{row['send_recv_pairs']} Send/Recv pairs"
            )
    rows = []
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
        "suite": "placement",
        "settings": {**asdict(settings), "model": "mlp", "dtype": "float32"},
        "target_ratio": TARGET_RATIO,
        "rows": rows,
        "trials": trials,
        "ratio": {**spread(per_trial), "of_medians": ratio},
        "met": ratio <= TARGET_RATIO,
    }


def run_from_args(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    defaults = PlacementSettings()
    settings = PlacementSettings(
        hidden=args.placement_hidden or defaults.hidden,
        batch_size=args.placement_batch or defaults.batch_size,
        steps=args.train_steps or defaults.steps,
        repeats=args.repeats,
        seed=args.seed,
    )
    return run_placement_suite(settings, progress)


def render(result: dict[str, Any]) -> str:
    settings, ratio = result["settings"], result["ratio"]
    lines = [
        f"### placement: model-parallel on {settings['devices']} devices, MLP "
        f"{','.join(map(str, settings['hidden']))} on {settings['dataset']}, batch "
        f"{settings['batch_size']}",
        "",
        "| --placement | ms/step (median) | min - max | predicted ms/step | Send/Recv pairs | "
        "bytes sent/step |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        step = row["step_ms"]
        lines.append(
            f"| {row['placement']} | {step['median']:.2f} | {step['min']:.2f} - "
            f"{step['max']:.2f} | {row['predicted_step_ms']['median']:.2f} | "
            f"{row['send_recv_pairs']['median']:.0f} | "
            f"{row['bytes_sent_per_step']['median']:,.0f} |"
        )
    verdict = "met" if result["met"] else "NOT met"
    lines += [
        "",
        f"- greedy / balanced-params step time: **{ratio['of_medians']:.3f}** (medians; per "
        f"trial pair {ratio['min']:.3f} - {ratio['max']:.3f}); target <= "
        f"{result['target_ratio']:g}: {verdict}",
        f"- method: {settings['repeats']} trials of {settings['steps']} steps per placement, "
        "alternating; step time = global batch / the summary's steady samples/s; each run "
        "measures its own costs (an empty run store); predictions from the plan the run used",
    ]
    for trial in result["trials"][:2]:
        moved = ", ".join(
            f"{t['key'].split('->')[0]} {t['bytes']:,} B ({t['predicted_ms']:.2f} ms)"
            for t in trial["largest_transfers"]
        )
        lines.append(f"- {trial['placement']}'s largest Send/Recv pairs: {moved or 'none'}")
    return "\n".join(lines)
