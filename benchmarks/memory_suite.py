"""The ``memory`` suite: peak resident memory of every process of a CIFAR-10 run, this
checkout beside another (``--compare-with``: e.g. a git worktree of an earlier commit).

A full-size CIFAR-10 (50,000 training and 10,000 test images in the official binary layout,
random pixels: nothing is downloaded) is written to a temporary folder; then ``dtrain run
--strategy mirrored --devices 2 --dataset cifar10:DIR`` runs as a user runs it, a whole
process, once per checkout per repeat, alternating. While it runs, the suite reads the peak
resident set (``VmHWM`` in ``/proc/PID/status``, the kernel's high-water mark, so no peak
falls between two readings) of the ``dtrain`` process (the client) and of each Dask worker it
spawned. The runs' final losses are printed beside them: the same arithmetic gives the same
loss whichever way the data set is held.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from benchmarks.distributed_suites import spread
from benchmarks.flags import Flag, settings_suite
from benchmarks.report import table
from benchmarks.suite import Progress
from benchmarks.whole_runs import dtrain_command

TRAIN_IMAGES, TEST_IMAGES = 50_000, 10_000
POLL_SECONDS = 0.02
_MIB = 1 << 20


@dataclass(frozen=True)
class MemorySettings:
    steps: int = 20
    repeats: int = 1
    train_images: int = TRAIN_IMAGES
    test_images: int = TEST_IMAGES
    compare_with: str | None = None  # a checkout of the workbench (its repository root)
    seed: int = 0


def write_cifar10(
    folder: Path, train_images: int, seed: int = 0, test_images: int = TEST_IMAGES
) -> None:
    """Five training batches (fewer with fewer than five images) and a test batch of random
    images, in CIFAR-10's binary layout."""
    folder.mkdir(parents=True, exist_ok=True)
    generator = np.random.default_rng(seed)
    counts = [train_images // 5 + (i < train_images % 5) for i in range(5)]
    files = [f"data_batch_{i + 1}.bin" for i in range(5) if counts[i]] + ["test_batch.bin"]
    for name, count in zip(files, [*filter(None, counts), test_images]):
        records = generator.integers(0, 256, (count, 3073), dtype=np.uint8)
        records[:, 0] %= 10
        (folder / name).write_bytes(records.tobytes())


def _peak_resident(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _is_worker(process: psutil.Process) -> bool:
    try:
        return "spawn_main" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def measure_run(command: list[str], environment: dict[str, str], folder: Path) -> dict[str, Any]:
    """Run ``command`` in ``folder`` and follow its peak resident memory and its workers'."""
    # Its progress goes to a file: a pipe nobody reads while polling could fill and stall it.
    with tempfile.TemporaryFile(mode="w+") as errors:
        run = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=environment,
            cwd=folder,  # not a checkout: ``python -c`` imports from its working directory first
        )
        peaks = _follow_peaks(run)
        out, _ = run.communicate()
        if run.returncode != 0:
            errors.seek(0)
            raise RuntimeError(f"{' '.join(command[:3])} ... failed:\n{errors.read()[-2000:]}")
    summary = json.loads(out)
    return {
        "client_bytes": peaks.pop(run.pid, 0),
        "worker_bytes": [peaks[pid] for pid in sorted(peaks)],
        "final_loss": summary["final_loss"],
        "wall_seconds": summary["wall_seconds"],
    }


def _follow_peaks(run: subprocess.Popen) -> dict[int, int]:
    """Peak resident bytes by pid of ``run`` and of the workers it spawns, until it exits."""
    client = psutil.Process(run.pid)
    peaks: dict[int, int] = {}
    workers: dict[int, bool] = {}
    while run.poll() is None:
        peaks[run.pid] = max(peaks.get(run.pid, 0), _peak_resident(run.pid) or 0)
        try:
            children = client.children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            if child.pid not in workers:
                workers[child.pid] = _is_worker(child)
            if workers[child.pid]:
                peaks[child.pid] = max(peaks.get(child.pid, 0), _peak_resident(child.pid) or 0)
        time.sleep(POLL_SECONDS)
    return peaks


def _command(folder: Path, settings: MemorySettings) -> list[str]:
    flags = ["--strategy", "mirrored", "--devices", "2", "--dataset", f"cifar10:{folder}"]
    flags += ["--model", "mlp", "--hidden", "64", "--batch-size", "256"]
    flags += ["--steps", str(settings.steps), "--seed", str(settings.seed)]
    flags += ["--device-type", "cpu", "--no-calibrate", "--json"]
    return dtrain_command("run", *flags)


def _environment(checkout: str | None) -> dict[str, str]:
    """This process's environment; with ``checkout``, its workbench imported first (by the
    client and, inherited, by every worker it spawns)."""
    environment = dict(os.environ)
    if checkout is not None:
        environment["PYTHONPATH"] = os.pathsep.join(
            [str(Path(checkout).resolve()), *filter(None, [environment.get("PYTHONPATH")])]
        )
    return environment


def _imported_from(environment: dict[str, str], folder: Path) -> str:
    probe = "import workbench, pathlib; print(pathlib.Path(workbench.__file__).parent.parent)"
    command = [sys.executable, "-c", probe]
    found = subprocess.run(
        command, env=environment, cwd=folder, capture_output=True, text=True, check=True
    )
    return found.stdout.strip()


def run_memory_suite(settings: MemorySettings, progress: Progress) -> dict[str, Any]:
    contenders = {"this checkout": _environment(None)}
    if settings.compare_with is not None:
        contenders["compared"] = _environment(settings.compare_with)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory(prefix="dtrain-cifar10-") as name:
        folder = Path(name)
        sources = {label: _imported_from(env, folder) for label, env in contenders.items()}
        write_cifar10(folder, settings.train_images, settings.seed, settings.test_images)
        progress(f"CIFAR-10 layout, {settings.train_images:,} + {settings.test_images:,} images")
        for repeat in range(settings.repeats):
            order = list(contenders) if repeat % 2 == 0 else list(reversed(contenders))
            for name in order:
                result = measure_run(_command(folder, settings), contenders[name], folder)
                progress(
                    f"{name} ({sources[name]}), run {repeat + 1}: client "
                    f"{result['client_bytes'] / _MIB:,.0f} MiB, workers "
                    + ", ".join(f"{b / _MIB:,.0f}" for b in result["worker_bytes"])
                    + " MiB"
                )
                runs[name].append(result)
    rows: dict[str, dict[str, Any]] = {}
    for name, results in runs.items():
        rows[name] = {
            "source": sources[name],
            "client_mib": spread([r["client_bytes"] / _MIB for r in results]),
            "worker_mib": spread([max(r["worker_bytes"]) / _MIB for r in results]),
            "final_loss": [r["final_loss"] for r in results],
            "wall_seconds": spread([r["wall_seconds"] for r in results]),
        }
    result = {"suite": "memory", "settings": asdict(settings), "rows": rows}
    if "compared" in rows:
        result["worker_drop"] = (
            rows["compared"]["worker_mib"]["median"] / rows["this checkout"]["worker_mib"]["median"]
        )
        result["client_drop"] = (
            rows["compared"]["client_mib"]["median"] / rows["this checkout"]["client_mib"]["median"]
        )
    return result


add_flags, run = settings_suite(
    MemorySettings,
    run_memory_suite,
    ("steps", "repeats", "seed"),
    compare_with=Flag(
        ("--compare-with",),
        "another workbench checkout (its repository root, e.g. a git worktree of an earlier "
        "commit) to run beside this one",
        str,
    ),
)


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    rows = [
        (
            f"{name} (`{row['source']}`)",
            f"{row['client_mib']['median']:,.0f}",
            f"{row['worker_mib']['median']:,.0f}",
            ", ".join(f"{loss:.6f}" for loss in row["final_loss"]),
            f"{row['wall_seconds']['median']:.1f}",
        )
        for name, row in result["rows"].items()
    ]
    columns = ("workbench", "client peak MiB", "largest worker peak MiB", "final loss", "wall s")
    lines = [
        f"### memory: peak resident memory per process, mirrored on 2 CPU devices, CIFAR-10 "
        f"layout ({settings['train_images']:,} + {settings['test_images']:,} images), MLP "
        f"3072-64-10, {settings['steps']} steps, median of {settings['repeats']} runs",
        "",
        *table(columns, "lrrrr", rows),
    ]
    if "worker_drop" in result:
        lines += [
            "",
            f"- worker peak: **{result['worker_drop']:.1f}x** lower in this checkout; client "
            f"peak {result['client_drop']:.1f}x lower",
        ]
    return "\n".join(lines)
