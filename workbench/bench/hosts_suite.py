"""The ``hosts`` suite: the planner's prediction across a slow network, against the same run.

Two emulated hosts of two workers each (:mod:`workbench.bench.emulated_hosts`: network
namespaces, each host's link limited to ``--link-rate``) train the reference MLP
(784-512-512-10 on ``synthetic``, global batch 256) with ``multi-worker-mirrored`` (the
hierarchical all-reduce: shared memory inside a host, one exchange between the hosts' leaders
over the link) and with ``mirrored --allreduce ring`` (a flat ring, two of whose four hops
cross the link), through ``run_training`` with ``--cluster`` as ``dtrain run`` does. Each run
calibrates afresh at its start (shared-memory and TCP links measured pair by pair, the shaped
ones included) and reports its predicted and measured step; the bytes each device sent show
what crossed the link. Target: within 20%. Needs root and iproute2.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

from workbench.bench.distributed_suites import Progress, spread
from workbench.bench.emulated_hosts import emulated_hosts
from workbench.bench.planner_suite import own_run_store
from workbench.config import RunConfig
from workbench.launch.runner import run_training

CLOSE = 0.20
CONFIGURATIONS = (
    {"strategy": "multi-worker-mirrored", "hosts": 2},
    {"strategy": "mirrored", "allreduce": "ring"},
)


@dataclass(frozen=True)
class HostsSettings:
    rate: str = "1gbit"
    batch_size: int = 256
    steps: int = 200
    repeats: int = 3
    seed: int = 0


def _run(settings: HostsSettings, address: str, configuration: dict) -> dict[str, Any]:
    config = RunConfig(
        model="mlp",
        dataset="synthetic",
        hidden=(512, 512),
        devices=4,
        cluster=address,
        batch_size=settings.batch_size,
        steps=settings.steps,
        seed=settings.seed,
        device_type="cpu",
        **configuration,
    )
    with own_run_store():
        result = run_training(config, progress=lambda line: None)
    sent: dict[str, int] = {}
    for event in result.log.phases():
        if event.phase == "allreduce" and event.step >= settings.steps // 10:
            sent[event.device] = sent.get(event.device, 0) + event.bytes
    steady = settings.steps - settings.steps // 10
    return {
        "predicted": result.summary["predicted_step_ms"],
        "measured": result.summary["measured_step_ms"],
        "bytes_per_step": {device: total // steady for device, total in sorted(sent.items())},
    }


def run_hosts_suite(settings: HostsSettings, progress: Progress) -> dict[str, Any]:
    runs: dict[int, list[dict[str, Any]]] = {}
    with emulated_hosts(hosts=2, workers_per_host=2, rate=settings.rate) as hosts:
        progress(f"2 emulated hosts x 2 workers, links at {settings.rate}")
        for repeat in range(settings.repeats):
            for index, configuration in enumerate(CONFIGURATIONS):
                progress(f"{configuration['strategy']}: run {repeat + 1}/{settings.repeats}")
                result = _run(settings, hosts.scheduler_address, configuration)
                progress(
                    f"  predicted {result['predicted']:.2f} ms, measured "
                    f"{result['measured']:.2f} ms"
                )
                runs.setdefault(index, []).append(result)
    rows = []
    for index, results in runs.items():
        predicted = spread([r["predicted"] for r in results])
        measured = spread([r["measured"] for r in results])
        error = predicted["median"] / measured["median"] - 1
        rows.append(
            {
                **CONFIGURATIONS[index],
                "predicted_ms": predicted,
                "measured_ms": measured,
                "error": error,
                "within": abs(error) <= CLOSE,
                "bytes_per_step": results[-1]["bytes_per_step"],
            }
        )
    return {
        "suite": "hosts",
        "settings": asdict(settings),
        "rows": rows,
        "met": all(row["within"] for row in rows),
    }


def run_from_args(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    defaults = HostsSettings()
    settings = HostsSettings(
        rate=args.link_rate,
        steps=args.train_steps or defaults.steps,
        repeats=args.repeats,
        seed=args.seed,
    )
    return run_hosts_suite(settings, progress)


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    lines = [
        f"### hosts: 2 emulated hosts x 2 workers, links at {settings['rate']}, MLP "
        f"784-512-512-10, batch {settings['batch_size']}, {settings['steps']} steps, median of "
        f"{settings['repeats']} runs",
        "",
        "| strategy | predicted ms | measured ms (min - max) | error | bytes sent per step "
        "(devices 0-3) |",
        "|---|---:|---:|---:|---|",
    ]
    for row in result["rows"]:
        name = row["strategy"] + (" --allreduce ring" if "allreduce" in row else "")
        measured = row["measured_ms"]
        mark = "" if row["within"] else " (>20%)"
        sent = ", ".join(f"{value:,}" for value in row["bytes_per_step"].values())
        lines.append(
            f"| {name} | {row['predicted_ms']['median']:.2f} | {measured['median']:.2f} "
            f"({measured['min']:.2f} - {measured['max']:.2f}) | {row['error']:+.0%}{mark} | "
            f"{sent} |"
        )
    verdict = "met" if result["met"] else "NOT met"
    lines += ["", f"- every configuration within 20%: {verdict}"]
    return "\n".join(lines)
