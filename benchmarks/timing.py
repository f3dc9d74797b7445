"""Interleaved timing: every contender measured in the same stretch of machine time, each in
its own process.

A laptop or a shared server drifts: the clock speed changes with temperature, a neighbour
starts a build, the OS moves a thread. Timing contender A for ten seconds and then contender B
puts all of one drift on A and all of the next on B. Instead, each round runs a short burst of
every contender, rotating which goes first, so that a disturbance lands on all of them alike;
the figure reported is the median over rounds (robust to the odd disturbed round) with the
spread beside it.

Contenders sharing one process share its state, and that state is not neutral. The largest
effect found is glibc's malloc: its mmap and trim thresholds move with the history of large
allocations, and in an unlucky state every step hands its multi-megabyte temporaries back to
the OS and page-faults them in again (measured: 1,520 faults and about 30% more time per step of
the reference MLP, for NumPy and the workbench alike, depending only on what ran before). So by
default each contender lives in a worker process of its own (:class:`ProcessContender`) and
every worker fixes the thresholds the same way first (:func:`steady_allocator`); bursts still
run one at a time, interleaved. The page faults per step are measured and reported, so the
effect stays visible.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import importlib
import importlib.util
import multiprocessing
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from threadpoolctl import threadpool_limits

# Not on Windows: page faults then read as 0.
resource = importlib.import_module("resource") if importlib.util.find_spec("resource") else None


def _nothing() -> None:
    return None


class Timeable(Protocol):
    name: str

    def burst(self, steps: int) -> tuple[float, float]: ...


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource is not None else 0


@dataclass(frozen=True)
class Contender:
    """One thing to time, in this process: ``run`` does one unit of work (one training step).

    ``synchronize`` waits until queued device work is done (a GPU launches asynchronously, so
    a clock read without it measures the launch, not the work); a no-op on the CPU.
    """

    name: str
    run: Callable[[], Any]
    synchronize: Callable[[], None] = _nothing

    def burst(self, steps: int) -> tuple[float, float]:
        """Mean seconds and minor page faults per unit over ``steps`` back-to-back units."""
        self.synchronize()
        faults, start = _minor_faults(), time.perf_counter()
        for _ in range(steps):
            self.run()
        self.synchronize()
        return (time.perf_counter() - start) / steps, (_minor_faults() - faults) / steps


# mallopt parameter numbers from glibc's <malloc.h>.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def steady_allocator() -> bool:
    """Fix glibc's malloc thresholds for this process: blocks under 32 MiB come from the heap
    and the heap is trimmed only past 256 MiB free. Fixing the mmap threshold also turns off
    glibc's history-driven adjustment, so every process doing the same work behaves the same.
    Returns False (and changes nothing) where the C library has no ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(
        mallopt(_M_TRIM_THRESHOLD, 256 << 20)
    )


def _serve(factory: Callable[[], Any], threads: int, steady: bool, connection) -> None:
    """Worker loop: build the contender, then answer ``burst`` and method calls until told
    to stop. Thread limits and malloc settings are per process, so the worker sets its own."""
    try:
        if steady:
            steady_allocator()
        target = factory()
        with limited_threads(threads):
            connection.send(("ok", None))
            while (message := connection.recv())[0] != "stop":
                try:
                    if message[0] == "burst":
                        reply = Contender("", target.run, target.synchronize).burst(message[1])
                    else:
                        reply = getattr(target, message[1])()
                    connection.send(("ok", reply))
                except Exception:
                    connection.send(("error", traceback.format_exc()))
    except Exception:
        connection.send(("error", traceback.format_exc()))
    finally:
        connection.close()


class ProcessContender:
    """A contender built and run in a worker process of its own.

    ``factory`` (picklable: a module-level function or a ``functools.partial`` of one) builds
    the object in the worker; it must have ``run()`` and ``synchronize()``, and any other
    method without arguments can be called through :meth:`call`. ``run``, ``synchronize`` and
    ``parameters`` are forwarded, so a process contender stands in for a local one. With
    ``steady_malloc`` the worker calls :func:`steady_allocator` before building.
    """

    def __init__(
        self, name: str, factory: Callable[[], Any], threads: int = 1, steady_malloc: bool = True
    ) -> None:
        self.name = name
        # spawn, not fork: a fork would copy this process's state (allocator, thread pools,
        # an initialised CUDA context), the very thing the worker is there to escape.
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(
            target=_serve,
            args=(factory, threads, steady_malloc, child),
            name=f"bench-{name}",
            daemon=True,
        )
        self._process.start()
        child.close()

    def ready(self) -> ProcessContender:
        """Wait until the worker has built its contender (raises what went wrong there)."""
        self._answer()
        return self

    def _answer(self) -> Any:
        try:
            status, value = self._connection.recv()
        except EOFError:
            raise RuntimeError(f"benchmark worker {self.name!r} died") from None
        if status == "error":
            raise RuntimeError(f"benchmark worker {self.name!r} failed:\n{value}")
        return value

    def call(self, method: str) -> Any:
        self._connection.send(("call", method))
        return self._answer()

    def burst(self, steps: int) -> tuple[float, float]:
        self._connection.send(("burst", steps))
        return self._answer()

    def run(self) -> Any:
        return self.call("run")

    def synchronize(self) -> None:
        self.call("synchronize")

    def parameters(self) -> Any:
        return self.call("parameters")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._connection.send(("stop",))
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()
        self._connection.close()


@contextlib.contextmanager
def limited_threads(threads: int) -> Iterator[None]:
    """Every thread pool in the process at ``threads``: BLAS and OpenMP through threadpoolctl,
    and PyTorch's intra-op pool when torch is loaded. Enter it after the contenders are built,
    so that the libraries they load are limited too."""
    torch = sys.modules.get("torch")
    previous = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(threads)
        with contextlib.suppress(RuntimeError):
            # Settable only before the process's first parallel work; a step uses intra-op
            # threads, so when it is too late the inter-op pool simply stays idle.
            torch.set_num_interop_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            yield
    finally:
        if torch is not None and previous is not None:
            torch.set_num_threads(previous)


@dataclass(frozen=True)
class Spread:
    """Summary of a list of per-round values (seconds, or ratios)."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def quartiles(self) -> tuple[float, float]:
        """First and third quartile (inclusive method; equal to the value for one round)."""
        if len(self.values) < 2:
            return self.values[0], self.values[0]
        first, _, third = statistics.quantiles(self.values, n=4, method="inclusive")
        return first, third

    def summary(self, scale: float = 1.0) -> dict[str, float]:
        first, third = self.quartiles
        return {
            "median": self.median * scale,
            "min": min(self.values) * scale,
            "q1": first * scale,
            "q3": third * scale,
            "max": max(self.values) * scale,
        }


@dataclass(frozen=True)
class Timings:
    """What :func:`interleaved_rounds` measured for one contender."""

    seconds: Spread  # per-round mean seconds per unit
    faults: Spread  # per-round mean minor page faults per unit


def rotation(names: Sequence[str], round_index: int) -> list[str]:
    """The order of round ``round_index``: each contender leads equally often."""
    shift = round_index % len(names)
    return [*names[shift:], *names[:shift]]


def interleaved_rounds(
    contenders: Sequence[Timeable],
    rounds: int,
    steps_per_round: int,
    warmup_steps: int = 5,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Timings]:
    """Per-round timings of one unit of work for every contender, by name.

    Each contender first runs ``warmup_steps`` untimed units (caches, allocator pools, lazy
    initialisation). Then round ``r`` runs ``steps_per_round`` units of each contender in the
    order ``rotation(names, r)``.

    Examples
    --------
    >>> timings = interleaved_rounds([Contender("noop", lambda: None)], 3, 2, warmup_steps=1)
    >>> len(timings["noop"].seconds.values)
    3
    """
    if rounds < 1 or steps_per_round < 1:
        raise ValueError("rounds and steps_per_round must be at least 1")
    by_name = {contender.name: contender for contender in contenders}
    if len(by_name) != len(contenders):
        raise ValueError("contender names must be distinct")
    if warmup_steps > 0:
        for contender in contenders:
            contender.burst(warmup_steps)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in by_name}
    for round_index in range(rounds):
        for name in rotation(list(by_name), round_index):
            samples[name].append(by_name[name].burst(steps_per_round))
        if progress is not None:
            progress(f"round {round_index + 1}/{rounds}")
    return {
        name: Timings(Spread(tuple(s for s, _ in pairs)), Spread(tuple(f for _, f in pairs)))
        for name, pairs in samples.items()
    }


def paired_ratios(numerator: Spread, denominator: Spread) -> Spread:
    """Round-by-round ratios of two contenders timed in the same rounds.

    Both ran within seconds of each other in every round, so each ratio cancels the drift
    that round saw; the median of these is steadier than the ratio of the two medians.
    """
    return Spread(tuple(a / b for a, b in zip(numerator.values, denominator.values)))
