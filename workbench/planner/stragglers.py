"""Synchronous replicas wait for the slowest: a step's compute, stretched to its expected
maximum over the replicas.

Each replica's compute time varies from step to step (the run's other threads, interrupts,
memory traffic of its neighbours); calibration measures that spread as a coefficient of
variation (standard deviation over mean, :class:`~workbench.costs.Calibration`
``step_variation``). With ``n`` replicas whose times are independent and roughly normal, the
slowest takes, on average, the mean plus ``e(n)`` standard deviations, where ``e(n)`` is the
expected maximum of ``n`` standard normal samples (Blom's approximation of the normal order
statistics, within 5% of the exact values): 0 for one replica, 0.59 for two, 1.05 for four,
1.43 for eight.
"""

from __future__ import annotations

from statistics import NormalDist


def expected_maximum(count: int) -> float:
    """The expected largest of ``count`` standard normal samples (Blom's approximation).

    Examples
    --------
    >>> [round(expected_maximum(n), 2) for n in (1, 2, 4, 8)]
    [0.0, 0.59, 1.05, 1.43]
    """
    if count < 2:
        return 0.0
    return NormalDist().inv_cdf((count - 0.375) / (count + 0.25))


def straggler_factor(variation: float, replicas: int) -> float:
    """How much longer the slowest of ``replicas`` computes than one does on average.

    Examples
    --------
    >>> round(straggler_factor(0.1, 2), 3), straggler_factor(0.1, 1)
    (1.059, 1.0)
    """
    return 1.0 + max(variation, 0.0) * expected_maximum(replicas)
