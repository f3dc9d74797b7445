"""The ``step`` suite: one SGD training step of the reference MLP, workbench against its peers.

Three contenders train the same network (784 inputs, ReLU hidden layers, 10 classes, softmax
cross-entropy averaged over the batch, plain SGD) from the same initial parameters on the same
batch: the workbench's one-device :class:`~workbench.training.TrainingSession`, a hand-written
NumPy step and eager PyTorch, each by default in a worker process of its own. Before any
clock is read, :func:`check_agreement` proves that they compute the same step; then
:func:`~benchmarks.timing.interleaved_rounds` times them.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from benchmarks import numpy_reference, torch_reference
from benchmarks.flags import (
    Flag,
    non_negative,
    positive,
    settings_suite,
)
from benchmarks.report import span, table, verdict
from benchmarks.suite import SuiteFailed
from benchmarks.timing import (
    Contender,
    ProcessContender,
    Timings,
    interleaved_rounds,
    limited_threads,
    paired_ratios,
    steady_allocator,
)
from workbench.models import mlp
from workbench.optim import SGD
from workbench.runtime import array_module, resolve_device_type
from workbench.training import TrainingSession

INPUTS, CLASSES, DTYPE = 784, 10, "float32"
# The most the workbench may cost over the hand-written step before its overhead counts as a
# defect: a graph interpreter adds Python dispatch per op, and 15% of the step is its budget.
TARGET_WORKBENCH_OVER_NUMPY = 1.15
LABELS = {"workbench": "workbench", "numpy": "NumPy (hand-written)", "torch": "PyTorch (eager)"}


class AgreementError(SuiteFailed):
    """The contenders do not compute the same training step, so timing them means nothing."""


@dataclass(frozen=True)
class StepSettings:
    batch_size: int = 256
    hidden: tuple[int, ...] = (512, 512)
    threads: int = 1
    device_type: str = "cpu"
    rounds: int = 15
    steps_per_round: int = 10
    warmup_steps: int = 5
    learning_rate: float = 0.01
    seed: int = 0
    isolation: str = "process"  # or "none": every contender in this process
    allocator: str = "steady"  # or "default": glibc's malloc thresholds left to move

    @property
    def layers(self) -> list[int]:
        return [INPUTS, *self.hidden, CLASSES]


@dataclass(frozen=True)
class StepContender(Contender):
    """One implementation of the step, bound to its own copy of the batch: ``run`` does one
    step and returns the loss, ``parameters`` returns host copies under the workbench's names."""

    parameters: Callable[[], dict[str, np.ndarray]] = dict


def make_batch(settings: StepSettings) -> tuple[np.ndarray, np.ndarray]:
    """A reproducible host batch: pixel-like inputs in [0, 1) and uniform labels."""
    rng = np.random.default_rng(settings.seed)
    x = rng.random((settings.batch_size, INPUTS), dtype=np.float32)
    return x, rng.integers(0, CLASSES, settings.batch_size, dtype=np.int64)


def initial_parameters(settings: StepSettings) -> dict[str, np.ndarray]:
    """The workbench's initial parameters for this seed: every contender starts from them."""
    return mlp((INPUTS,), CLASSES, settings.hidden).init_parameters(settings.seed, DTYPE)


def flops_per_step(layers: Sequence[int], batch_size: int) -> int:
    """Matrix-multiply FLOPs of one step: forward, weight gradients and input gradients (the
    first layer's input gradient is never computed). Elementwise work is left out."""
    products = [fan_in * fan_out for fan_in, fan_out in itertools.pairwise(layers)]
    return 2 * batch_size * (2 * sum(products) + sum(products[1:]))


def build_contender(
    name: str, settings: StepSettings, initial: dict[str, np.ndarray], x, y
) -> StepContender:
    """Contender ``name`` (``workbench``, ``numpy`` or ``torch``) on the suite's device, from
    ``initial`` parameters, bound to the host batch ``x``, ``y`` (copied to the device)."""
    lr, gpu = settings.learning_rate, settings.device_type == "gpu"
    if name == "torch":
        torch = torch_reference.import_torch()
        if torch is None:
            raise RuntimeError(torch_reference.TORCH_MISSING)
        peer = torch_reference.TorchMLP(initial, lr, "cuda" if gpu else "cpu", torch)
        x_torch, y_torch = peer.batch(x, y)
        return StepContender(
            name, lambda: peer.step(x_torch, y_torch), peer.synchronize, peer.parameters
        )
    xp = array_module(settings.device_type)
    x_device, y_device = xp.asarray(x), xp.asarray(y)
    synchronize = (lambda: xp.cuda.Device().synchronize()) if gpu else (lambda: None)
    if name == "numpy":
        model = numpy_reference.HandWrittenMLP(initial, lr, xp=xp)
        return StepContender(
            name, lambda: model.step(x_device, y_device), synchronize, model.parameters
        )
    network = mlp((INPUTS,), CLASSES, settings.hidden)
    session = TrainingSession(network, SGD(), settings.batch_size, DTYPE, settings.seed, xp=xp)
    session.load_state(initial, {})  # SGD keeps no slots
    counter = itertools.count()
    return StepContender(
        name,
        lambda: session.step(x_device, y_device, learning_rate=lr, step=next(counter)),
        synchronize,
        session.parameters,
    )


@contextlib.contextmanager
def open_contenders(settings: StepSettings) -> Iterator[tuple[list[Any], dict[str, str]]]:
    """The available contenders, each in its own worker process (``settings.isolation`` is
    ``"process"``) or all in this one (``"none"``), and why the others are missing."""
    x, y = make_batch(settings)
    initial = initial_parameters(settings)
    missing: dict[str, str] = {}
    reason = torch_reference.unavailable_reason("cuda" if settings.device_type == "gpu" else "cpu")
    if reason is not None:
        missing["torch"] = reason
    names = [name for name in LABELS if name not in missing]
    steady = settings.allocator == "steady"
    if settings.isolation == "none":
        if steady:
            steady_allocator()  # for the rest of this process: there is no undoing mallopt
        yield [build_contender(name, settings, initial, x, y) for name in names], missing
        return
    workers = [
        ProcessContender(
            name,
            functools.partial(build_contender, name, settings, initial, x, y),
            settings.threads,
        )
        for name in names
    ]
    try:
        yield [worker.ready() for worker in workers], missing
    finally:
        for worker in workers:
            worker.close()


def _snapshot(contender: StepContender) -> dict[str, np.ndarray]:
    # On the CPU a session's host "copies" may alias its variables, which the step then
    # updates in place; an explicit copy freezes them.
    return {name: np.array(value, copy=True) for name, value in contender.parameters().items()}


def _relative_update_difference(before, after, reference_after) -> float:
    """``|update - reference update| / |reference update|`` (Frobenius norms, float64)."""
    update = after.astype(np.float64) - before
    reference_update = reference_after.astype(np.float64) - before
    scale = max(np.linalg.norm(reference_update), np.finfo(np.float32).tiny)
    return float(np.linalg.norm(update - reference_update) / scale)


def check_agreement(
    contenders: Sequence[StepContender],
    rtol: float = 1e-4,
    atol: float = 1e-6,
    update_rtol: float = 1e-3,
) -> dict[str, Any]:
    """Run one step of every contender and prove they computed the same step as the first.

    Checks, against the first contender: the parameters before the step are identical; the
    losses agree (``np.isclose(rtol, atol)``); the parameters after the step agree
    (``np.allclose(rtol, atol)``); and the updates themselves agree to ``update_rtol`` in norm.
    The last check is the sharp one: one small SGD step moves each weight by far less than
    ``rtol * |weight|``, so parameters alone would let a wrong learning rate or a wrong
    gradient through.

    Raises
    ------
    AgreementError
        Listing every disagreement found.

    Examples
    --------
    >>> settings = StepSettings(batch_size=8, hidden=(4,), isolation="none", allocator="default")
    >>> with open_contenders(settings) as (contenders, missing):
    ...     report = check_agreement(contenders)
    >>> report["reference"], report["max_relative_update_difference"]["numpy"]
    ('workbench', 0.0)
    """
    reference, *others = contenders
    before = {c.name: _snapshot(c) for c in contenders}
    losses = {c.name: float(c.run()) for c in contenders}
    for contender in contenders:
        contender.synchronize()
    after = {c.name: _snapshot(c) for c in contenders}
    start = {name: value.astype(np.float64) for name, value in before[reference.name].items()}
    problems: list[str] = []
    max_parameter_difference, max_update_difference = {}, {}
    for contender in others:
        name, ref = contender.name, reference.name
        if set(after[name]) != set(after[ref]):
            problems.append(f"{name}: parameter names differ from {ref}'s")
            continue
        for key in start:
            if not np.array_equal(before[name][key], before[ref][key]):
                problems.append(f"{name}: {key} did not start from {ref}'s initial value")
        if not np.isclose(losses[name], losses[ref], rtol=rtol, atol=atol):
            problems.append(f"{name}: loss {losses[name]!r} != {ref} loss {losses[ref]!r}")
        differences, updates = [], []
        for key, value in after[ref].items():
            mine = after[name][key]
            differences.append(float(np.max(np.abs(mine - value))))
            updates.append(_relative_update_difference(start[key], mine, value))
            if not np.allclose(mine, value, rtol=rtol, atol=atol):
                problems.append(f"{name}: {key} after one step differs from {ref}'s")
            if updates[-1] > update_rtol:
                problems.append(
                    f"{name}: the update of {key} differs from {ref}'s by {updates[-1]:.2e} "
                    f"of its norm (allowed {update_rtol:.0e})"
                )
        max_parameter_difference[name] = max(differences)
        max_update_difference[name] = max(updates)
    if problems:
        raise AgreementError(
            "the contenders do not compute the same training step, so their timings cannot "
            "be compared:\n  " + "\n  ".join(problems)
        )
    return {
        "reference": reference.name,
        "rtol": rtol,
        "atol": atol,
        "update_rtol": update_rtol,
        "losses": losses,
        "max_abs_parameter_difference": max_parameter_difference,
        "max_relative_update_difference": max_update_difference,
    }


def run_step_suite(settings: StepSettings, progress: Callable[[str], None]) -> dict[str, Any]:
    """Check, warm up and time the contenders; the suite's JSON-ready result."""
    settings = StepSettings(**{**asdict(settings), "hidden": tuple(settings.hidden)})
    resolve_device_type(settings.device_type)  # a GPU run without a GPU stops here, named
    progress(f"starting the contenders (isolation: {settings.isolation})")
    # Local contenders share this process's thread pools; workers limit their own.
    with (
        open_contenders(settings) as (contenders, missing),
        limited_threads(settings.threads),
    ):
        progress("checking that the contenders compute the same step")
        agreement = check_agreement(contenders)
        rounds, steps = settings.rounds, settings.steps_per_round
        progress(f"timing {rounds} interleaved rounds of {steps} steps")
        timings = interleaved_rounds(contenders, rounds, steps, settings.warmup_steps, progress)
    return _result(settings, agreement, timings, missing)


def _result(settings, agreement, timings: dict[str, Timings], missing) -> dict[str, Any]:
    flops = flops_per_step(settings.layers, settings.batch_size)
    contenders: dict[str, Any] = {}
    for name, label in LABELS.items():
        if name in missing:
            contenders[name] = {"label": label, "available": False, "reason": missing[name]}
            continue
        seconds = timings[name].seconds
        contenders[name] = {
            "label": label,
            "available": True,
            "ms_per_step": seconds.summary(scale=1e3),
            "samples_per_second": settings.batch_size / seconds.median,
            "gflops": flops / seconds.median / 1e9,
            "page_faults_per_step": timings[name].faults.median,
            "round_ms": [value * 1e3 for value in seconds.values],
        }
    spreads = {name: timing.seconds for name, timing in timings.items()}
    ratio = paired_ratios(spreads["workbench"], spreads["numpy"]).summary()
    # The target is set for the reference configuration; elsewhere (tiny layers, where fixed
    # per-op costs dominate, or a GPU) the ratio is reported but not judged.
    reference = (settings.hidden, settings.batch_size, settings.threads, settings.device_type)
    judged = reference == ((512, 512), 256, 1, "cpu")
    over_numpy: dict[str, Any] = {
        **ratio,
        "target_max": TARGET_WORKBENCH_OVER_NUMPY,
        "met": ratio["median"] <= TARGET_WORKBENCH_OVER_NUMPY if judged else None,
    }
    over_torch = None
    if "torch" in spreads:
        # Throughput is the inverse of step time, so torch's time over the workbench's.
        over_torch = paired_ratios(spreads["torch"], spreads["workbench"]).summary()
    return {
        "suite": "step",
        "settings": {
            **asdict(settings),
            "model": "mlp",
            "layers": settings.layers,
            "dtype": DTYPE,
        },
        "flops_per_step": flops,
        "agreement": agreement,
        "contenders": contenders,
        "ratios": {
            "workbench_over_numpy_step_time": over_numpy,
            "workbench_over_torch_throughput": over_torch,
        },
    }


add_flags, run = settings_suite(
    StepSettings,
    run_step_suite,
    ("batch_size", "hidden", "learning_rate", "seed"),
    device_type=Flag(("--device-type",), "where the contenders run", choices=("cpu", "gpu")),
    threads=Flag(("--threads",), "BLAS/torch threads", positive),
    rounds=Flag(("--rounds",), "timed rounds", positive),
    steps_per_round=Flag(("--steps-per-round",), "steps per contender per round", positive),
    warmup_steps=Flag(("--warmup",), "untimed steps per contender", non_negative),
    isolation=Flag(
        ("--isolation",),
        "process: each contender in its own worker process; none: all in this one",
        choices=("process", "none"),
    ),
    allocator=Flag(
        ("--allocator",),
        "steady: fix glibc's malloc thresholds in every contender's process; default: "
        "leave glibc's history-dependent defaults (then watch the page-faults column)",
        choices=("steady", "default"),
    ),
)


COLUMNS = ("contender", "ms/step (median)", "min - max", "samples/s", "GFLOP/s")


def _row(row: dict[str, Any]) -> tuple[object, ...]:
    if not row["available"]:
        return (row["label"], row["reason"], *[""] * 4)
    ms = row["ms_per_step"]
    return (
        row["label"],
        f"{ms['median']:.2f}",
        span(ms),
        f"{row['samples_per_second']:,.0f}",
        f"{row['gflops']:.1f}",
        f"{row['page_faults_per_step']:,.0f}",
    )


def render(result: dict[str, Any]) -> str:
    """The suite's result as Markdown: a heading, the table, the ratios and the method."""
    settings, ratios = result["settings"], result["ratios"]
    threads = f"{settings['threads']} thread" + ("s" if settings["threads"] != 1 else "")
    judged = verdict(
        ratios["workbench_over_numpy_step_time"]["met"], "judged at the reference size only"
    )
    lines = [
        f"### step: one SGD step of MLP {'-'.join(map(str, settings['layers']))}, batch "
        f"{settings['batch_size']}, {settings['dtype']}, {threads}, "
        f"{settings['device_type'].upper()}",
        "",
        *table(
            (
                "contender",
                "ms/step (median)",
                "min - max",
                "samples/s",
                "GFLOP/s",
                "page faults/step",
            ),
            "lrrrrr",
            map(_row, result["contenders"].values()),
        ),
    ]
    over_numpy, over_torch = (
        ratios["workbench_over_numpy_step_time"],
        ratios["workbench_over_torch_throughput"],
    )
    lines += [
        "",
        f"- workbench / NumPy step time: **{over_numpy['median']:.2f}** (per round "
        f"{over_numpy['min']:.2f} - {over_numpy['max']:.2f}; target <= "
        f"{over_numpy['target_max']:.2f}: {judged})",
    ]
    if over_torch is not None:
        lines.append(
            f"- workbench / PyTorch throughput: **{over_torch['median']:.2f}** (per round "
            f"{over_torch['min']:.2f} - {over_torch['max']:.2f}; above 1 means faster)"
        )
    agreement = result["agreement"]
    worst = max(agreement["max_relative_update_difference"].values(), default=0.0)
    lines += [
        f"- agreement after one step from the same parameters: losses and parameters within "
        f"rtol {agreement['rtol']:g}, atol {agreement['atol']:g}; updates within "
        f"{worst:.1e} of their norm",
        f"- method: {settings['warmup_steps']} warm-up steps each, then {settings['rounds']} "
        f"rounds x {settings['steps_per_round']} steps of each contender, interleaved (order "
        "rotated every round); median and range over rounds",
        "- isolation: "
        + (
            "each contender in a worker process of its own"
            if settings["isolation"] == "process"
            else "all contenders in one process (sharing its allocator and thread pools)"
        )
        + "; malloc: "
        + (
            "glibc thresholds fixed (mmap 32 MiB, trim 256 MiB) in every process"
            if settings["allocator"] == "steady"
            else "glibc defaults (thresholds move with each process's history)"
        ),
    ]
    return "\n".join(lines)
