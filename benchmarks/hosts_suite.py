"""The ``hosts`` suite: the planner's prediction across a slow network, against the same run.

Two emulated hosts of two workers each (:mod:`benchmarks.emulated_hosts`: network
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

from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.distributed_suites import own_run_store, spread
from benchmarks.emulated_hosts import emulated_hosts
from benchmarks.flags import Flag, settings_suite
from benchmarks.report import median_span, table, verdict
from benchmarks.suite import Progress
from workbench.config import RunConfig
from workbench.launch.runner import run_training

CLOSE = 0.20
CONFIGURATIONS: tuple[dict[str, Any], ...] = (
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


add_flags, run = settings_suite(
    HostsSettings,
    run_hosts_suite,
    ("steps", "repeats", "seed"),
    rate=Flag(("--link-rate",), "the emulated hosts' link rate, as tc writes it", str),
)


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    rows = [
        (
            row["strategy"] + (" --allreduce ring" if "allreduce" in row else ""),
            f"{row['predicted_ms']['median']:.2f}",
            median_span(row["measured_ms"]),
            f"{row['error']:+.0%}{'' if row['within'] else ' (>20%)'}",
            ", ".join(f"{value:,}" for value in row["bytes_per_step"].values()),
        )
        for row in result["rows"]
    ]
    columns = ("strategy", "predicted ms", "measured ms (min - max)", "error")
    return "\n".join(
        [
            f"### hosts: 2 emulated hosts x 2 workers, links at {settings['rate']}, MLP "
            f"784-512-512-10, batch {settings['batch_size']}, {settings['steps']} steps, "
            f"median of {settings['repeats']} runs",
            "",
            *table((*columns, "bytes sent per step (devices 0-3)"), "lrrrl", rows),
            "",
            f"- every configuration within 20%: {verdict(result['met'])}",
        ]
    )
