"""The ``ddp`` suite: synchronous data parallelism on 2 CPU devices, the workbench's
``mirrored`` strategy against PyTorch ``DistributedDataParallel`` (gloo).

Both train the reference MLP (784-512-512-10, ReLU, softmax cross-entropy) with plain SGD in
float32 on a global batch of 256 split over 2 processes with one thread each. The workbench
is a real ``run_training`` (its devices are Dask workers exchanging gradients peer to peer with
a ring all-reduce); DDP is :mod:`benchmarks.ddp_reference`. Each contender runs
``repeats`` times, alternating with the other, and reports its median steady-state samples/s.
For context, the same step on one device: the workbench's ``one-device`` and single-process
PyTorch (one thread each); and ``mirrored`` on a cluster without TLS (``DTRAIN_LOCAL_TLS=0``:
the clusters the workbench starts speak TLS), which measures what TLS costs, side by side.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks import ddp_reference, torch_reference
from benchmarks.distributed_suites import Trainer, spread, workbench_config
from benchmarks.flags import settings_suite
from benchmarks.report import table, verdict
from benchmarks.suite import Progress
from benchmarks.timing import Spread, paired_ratios
from workbench.events.summary import warmup_steps

TARGET_WORKBENCH_OVER_DDP = 1.0  # mirrored must be at least as fast as DDP
LABELS = {
    "mirrored": "workbench mirrored",
    "ddp": "PyTorch DDP (gloo)",
    "mirrored_without_tls": "workbench mirrored, TLS off",
    "one_device": "workbench one-device",
    "torch": "PyTorch, one process",
}


@dataclass(frozen=True)
class DDPSuiteSettings:
    devices: int = 2
    batch_size: int = 256  # global
    hidden: tuple[int, ...] = (512, 512)
    steps: int = 200  # per run; the first 10% (at most 20) are warm-up
    repeats: int = 3
    learning_rate: float = 0.01
    seed: int = 0


def _orders(repeats: int) -> list[list[str]]:
    """Per repeat, who runs in what order: the pair being compared back to back, alternating
    who goes first, then the context rows."""
    return [
        ["mirrored", "ddp", "mirrored_without_tls", "one_device", "torch"]
        if index % 2 == 0
        else ["mirrored_without_tls", "ddp", "mirrored", "torch", "one_device"]
        for index in range(repeats)
    ]


@contextlib.contextmanager
def _without_tls() -> Iterator[None]:
    """Clusters started meanwhile speak plain TCP (``workbench.runtime.cluster.local_security``)."""
    before = os.environ.get("DTRAIN_LOCAL_TLS")
    os.environ["DTRAIN_LOCAL_TLS"] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ["DTRAIN_LOCAL_TLS"]
        else:
            os.environ["DTRAIN_LOCAL_TLS"] = before


def run_ddp_suite(settings: DDPSuiteSettings, progress: Progress) -> dict[str, Any]:
    """Run every contender ``settings.repeats`` times, alternating; the JSON-ready result."""
    if settings.batch_size % settings.devices:
        raise ValueError("the global batch must split evenly over the devices")
    missing = {}
    reason = torch_reference.unavailable_reason("cpu")
    if reason is not None:
        missing = {"ddp": reason, "torch": reason}
    warmup = warmup_steps(settings.steps)
    configs = {
        name: workbench_config(
            strategy,
            devices,
            "synthetic",
            settings.hidden,
            settings.batch_size,
            settings.steps,
            settings.learning_rate,
            settings.seed,
        )
        for name, strategy, devices in (
            ("mirrored", "mirrored", settings.devices),
            ("one_device", "one-device", 1),
        )
    }
    peers = {
        name: ddp_reference.DDPSettings(
            processes=processes,
            global_batch=settings.batch_size,
            hidden=tuple(settings.hidden),
            steps=settings.steps - warmup,
            warmup=warmup,
            learning_rate=settings.learning_rate,
            seed=settings.seed,
        )
        for name, processes in (("ddp", settings.devices), ("torch", 1))
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in LABELS if name not in missing}
    with Trainer(threads=1) as trainer:
        for index, order in enumerate(_orders(settings.repeats)):
            for name in order:
                if name in missing:
                    continue
                progress(f"repeat {index + 1}/{settings.repeats}: {LABELS[name]}")
                if name == "mirrored_without_tls":
                    with _without_tls():
                        runs[name].append(trainer(configs["mirrored"]))
                elif name in configs:
                    runs[name].append(trainer(configs[name]))
                else:
                    runs[name].append(ddp_reference.run_ddp(peers[name]))
                progress(f"  {runs[name][-1]['samples_per_second']:,.0f} samples/s")
    return _result(settings, warmup, runs, missing)


def _result(settings, warmup, runs, missing) -> dict[str, Any]:
    contenders: dict[str, Any] = {}
    rates: dict[str, Spread] = {}
    for name, label in LABELS.items():
        if name in missing:
            contenders[name] = {"label": label, "available": False, "reason": missing[name]}
            continue
        rates[name] = Spread(tuple(run["samples_per_second"] for run in runs[name]))
        row = {
            "label": label,
            "available": True,
            "samples_per_second": rates[name].summary(),
            "ms_per_step": spread(
                [settings.batch_size / rate for rate in rates[name].values], scale=1e3
            ),
            "runs": runs[name],
        }
        if "phases_ms" in runs[name][0]:
            row["phases_ms"] = {
                phase: spread([run["phases_ms"][phase] for run in runs[name]])["median"]
                for phase in runs[name][0]["phases_ms"]
            }
        contenders[name] = row
    ratios: dict[str, Any] = {
        "workbench_over_ddp_throughput": None,
        "one_device_over_torch_throughput": None,
        # What TLS costs the workbench: mirrored with it over mirrored without, run by run.
        "tls_over_plain_throughput": paired_ratios(
            rates["mirrored"], rates["mirrored_without_tls"]
        ).summary(),
    }
    if "ddp" in rates:
        # Repeat by repeat: the two ran back to back, so each ratio cancels that minute's drift.
        paired = paired_ratios(rates["mirrored"], rates["ddp"]).summary()
        paired["of_medians"] = rates["mirrored"].median / rates["ddp"].median
        paired["target_min"] = TARGET_WORKBENCH_OVER_DDP
        paired["met"] = paired["median"] >= TARGET_WORKBENCH_OVER_DDP
        ratios["workbench_over_ddp_throughput"] = paired
        ratios["one_device_over_torch_throughput"] = paired_ratios(
            rates["one_device"], rates["torch"]
        ).summary()
    return {
        "suite": "ddp",
        "settings": {
            **asdict(settings),
            "layers": [784, *settings.hidden, 10],
            "dtype": "float32",
            "optimizer": "sgd",
            "per_device_batch": settings.batch_size // settings.devices,
            "warmup_steps": warmup,
            "timed_steps": settings.steps - warmup,
            "threads_per_process": 1,
            "ddp_backend": "gloo",
        },
        "contenders": contenders,
        "ratios": ratios,
    }


add_flags, run = settings_suite(
    DDPSuiteSettings,
    run_ddp_suite,
    ("devices", "batch_size", "hidden", "steps", "repeats", "learning_rate", "seed"),
)


def _row(row: dict[str, Any]) -> tuple[object, ...]:
    if not row["available"]:
        return (row["label"], row["reason"], *[""] * 6)
    rate, phases = row["samples_per_second"], row.get("phases_ms")
    names = ("compute", "allreduce", "update", "other")
    return (
        row["label"],
        f"{rate['median']:,.0f}",
        f"{rate['min']:,.0f} - {rate['max']:,.0f}",
        f"{row['ms_per_step']['median']:.2f}",
        *(f"{phases[name]:.2f}" if phases else "" for name in names),
    )


def render(result: dict[str, Any]) -> str:
    """The suite's result as Markdown."""
    settings, ratios = result["settings"], result["ratios"]
    columns = ("contender", "samples/s (median)", "min - max", "ms/step", "compute")
    lines = [
        f"### ddp: data parallel on {settings['devices']} CPU devices, MLP "
        f"{'-'.join(map(str, settings['layers']))}, global batch {settings['batch_size']} "
        f"({settings['per_device_batch']} per device), float32, SGD, 1 thread per process",
        "",
        *table(
            (*columns, "all-reduce", "update", "other"),
            "lrrrrrrr",
            [_row(row) for row in result["contenders"].values()],
        ),
        "",
    ]
    ratio = ratios["workbench_over_ddp_throughput"]
    if ratio is not None:
        context = ratios["one_device_over_torch_throughput"]
        lines += [
            f"- workbench mirrored / DDP samples/s: **{ratio['median']:.2f}** (per repeat "
            f"{ratio['min']:.2f} - {ratio['max']:.2f}; target >= {ratio['target_min']:.2f}: "
            f"{verdict(ratio['met'])})",
            f"- context, one device: workbench / PyTorch samples/s {context['median']:.2f}",
        ]
    tls = ratios["tls_over_plain_throughput"]
    lines.append(
        f"- TLS on / off (the workbench's clusters speak TLS): mirrored samples/s "
        f"{tls['median']:.3f} (per repeat {tls['min']:.3f} - {tls['max']:.3f})"
    )
    lines += [
        f"- method: {settings['repeats']} runs of each contender, alternating (mirrored and DDP "
        f"back to back); {settings['steps']} steps per run, the first "
        f"{settings['warmup_steps']} untimed; medians over runs",
        "- ms/step: the global batch over samples/s. Phase columns (workbench, from its event "
        "log; means over steady steps and devices): compute = forward + backward on the "
        "device's shard (one-device: the whole step); all-reduce = the exposed gradient "
        "exchange after compute, including waiting for the slower device; other = ms/step "
        "minus the three (task dispatch, the step loop)",
    ]
    return "\n".join(lines)
