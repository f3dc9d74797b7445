"""Benchmarks: the workbench measured side by side with the peers a user would otherwise pick.

What flows in: ``python -m benchmarks [SUITE [flags]]`` from the repository's root (from a
source checkout, ``dtrain bench ...`` runs the same). What flows out: a Markdown report (or one
JSON object with ``--json``) headed by the machine it ran on. This package is not part of the
installed ``workbench`` package: it measures the package from outside, with peers (PyTorch) and
tools (network namespaces, git worktrees) a user's install has no need of.

Suites (registered by name in :data:`benchmarks.command.SUITES`, each a module
``NAME_suite.py`` of the shape :mod:`benchmarks.suite` describes):

- ``step``: one SGD training step of the reference MLP 784-512-512-10 (batch 256, float32, one
  thread) by the workbench's one-device session, by a hand-written NumPy step and by eager
  PyTorch. Target: workbench / NumPy step time <= 1.15.
- ``ddp``: ``mirrored`` on 2 CPU devices against PyTorch DDP (gloo, 2 processes) on the same
  MLP, global batch 256. Target: samples/s ratio >= 1.0.
- ``allreduce``: ring all-reduce of 64 MiB between Dask workers against its bound
  2(N-1)/N x S / B, with B the point-to-point bandwidth measured in the same run (and gloo's
  all-reduce beside it). Target: >= 70% of the bound.
- ``overhead``: per-step framework overhead on a tiny model (step time minus compute time).
- ``bubble``: the measured idle fraction of each pipeline schedule (GPipe, 1F1B, interleaved
  1F1B, ZB-H1 zero-bubble) against its formula. Targets: GPipe within 5 points; interleaved and
  zero-bubble below 1F1B and within 5 points of theirs.
- ``faults``: recovery from a SIGKILLed worker (``mirrored``, 2 devices, checkpoints every 20
  steps: the engine's ``recovery_seconds``, wall time with and without the kill, and whether
  the result is bit-identical), ``parameter-server`` sync with a straggler and one backup worker
  against none (samples/s, applied samples/s, accuracy), and async with a straggler (updates
  per worker).
- ``compression``: ``mirrored`` on 2 devices, 10 epochs of digits, once per ``--compression``
  value: test accuracy, gradient and compressed bytes, skipped steps.

Method of the ``step`` suite (:mod:`benchmarks.timing`; the distributed suites alternate
whole runs of each contender instead):

1. Agreement first. The contenders start from the same parameters and run one step on the same
   batch; losses, parameters and updates must agree or the suite fails (exit 1): timing two
   different computations proves nothing.
2. Isolation. Each contender runs in a worker process of its own with the same fixed malloc
   thresholds, so no contender inherits another's allocator or thread-pool state.
3. Warm-up, then interleaved rounds. Each round runs a short burst of every contender in turn,
   rotating who goes first, so machine noise (clock changes, neighbours) hits all alike.
4. Median over rounds, with the range beside it. Ratios are taken round by round (both sides
   ran seconds apart) and their median reported.

Reading results: compare rows of one report only (same machine, same minutes); a ratio whose
per-round range straddles the target is not a clear pass or fail, so run again with more
``--rounds``. A page-fault count above zero means a contender is paying for memory the OS
took back between steps. Timings from different machines are not comparable.
"""

from benchmarks.command import SUITES, bench_command

__all__ = ["SUITES", "bench_command"]
