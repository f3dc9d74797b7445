"""One configuration's predicted step: its strategy's programs simulated on a cluster's costs.

The step time is the simulated makespan plus what a step pays outside its programs: the
cost of a step beyond its nodes (measured by calibration) and, for strategies whose devices are
Dask workers, the client's dispatch of one task per device every ``STEPS_PER_TASK`` steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from workbench.config import RunConfig
from workbench.models import Sequential
from workbench.optim import Optimizer
from workbench.planner.device_costs import DeviceCosts
from workbench.planner.memory import DeviceMemory, predict_memory
from workbench.planner.step_programs import StepPrograms
from workbench.planner.strategy_planning import (
    PlanningError,
    planning_of,
    predicted_strategies,
)
from workbench.simulate import Timeline, pipeline_bubble, simulate
from workbench.strategies import STRATEGIES
from workbench.strategies.cluster_strategy import ClusterStrategy

__all__ = ["DeviceMemory", "PlanningError", "Prediction", "predict", "step_programs"]


@dataclass(frozen=True)
class Prediction:
    config: RunConfig
    step_seconds: float
    makespan: float  # of one step
    timeline: Timeline
    devices: tuple[str, ...]
    bubble: float | None
    # Each device's predicted peak memory, by category (workbench.planner.memory).
    memory_bytes: dict[str, DeviceMemory]
    rounds: int = 1  # steps the timeline holds (async parameter servers: several)
    # Bytes each device sends in one step, where the timeline holds exchanges timed as a
    # whole (a measured collective moves its bytes inside one timed interval).
    sent_per_step: dict[str, int] | None = None

    @property
    def samples_per_second(self) -> float:
        return self.config.batch_size / self.step_seconds

    def busy(self, device: str) -> float:
        """Seconds ``device`` computes in one step."""
        return self.timeline.busy(device) / self.rounds

    def largest_memory(self) -> tuple[str, DeviceMemory]:
        """The device with the largest predicted peak, and that peak."""
        return max(self.memory_bytes.items(), key=lambda item: item[1].total)

    def bytes_sent(self, device: str) -> int:
        """Bytes ``device`` sends in one step."""
        if self.sent_per_step is not None:
            return self.sent_per_step[device]
        return self.timeline.bytes_sent(device) // self.rounds


def step_programs(
    config: RunConfig,
    model: Sequential,
    optimizer: Optimizer,
    costs: DeviceCosts,
    devices: Sequence[str],
) -> StepPrograms:
    """The programs of ``config``'s strategy on ``devices`` (in the strategy's rank order), as
    the strategy's planning builds them (:mod:`workbench.planner.strategy_planning`)."""
    planning = planning_of(config.strategy)
    if planning is None:
        raise PlanningError(
            f"--strategy {config.strategy}: not predicted; the planner predicts "
            f"{', '.join(predicted_strategies())}"
        )
    return planning.programs(config, model, optimizer, costs, devices)


def predict(
    config: RunConfig,
    model: Sequential,
    optimizer: Optimizer,
    costs: DeviceCosts,
    devices: Sequence[str] | None = None,
) -> Prediction:
    """Simulate one step of ``config`` (``devices``: the names to use; default the
    strategy's own, which a calibration of a local cluster measured under)."""
    strategy = STRATEGIES[config.strategy]
    if devices is None:
        kind = "gpu" if config.device_type == "gpu" else "cpu"
        devices = strategy.device_names(config, kind)
    built = step_programs(config, model, optimizer, costs, devices)
    cores = costs.host_cores or None
    timeline = simulate(built.programs, built.link, cores, host_of=costs.host_of if cores else None)
    extra = costs.step_overhead_seconds
    if isinstance(strategy, ClusterStrategy):
        extra += costs.dispatch_per_step(timeline.makespan / built.rounds + extra)
    bubble = pipeline_bubble(timeline, built.stage_devices) if built.stage_devices else None
    sent = None
    if costs.collectives:
        # The same step message by message: what it sends (its timing is the measured one).
        plain = step_programs(config, model, optimizer, replace(costs, collectives={}), devices)
        messages = simulate(plain.programs, plain.link)
        sent = {device: messages.bytes_sent(device) // plain.rounds for device in devices}
    return Prediction(
        config=config,
        step_seconds=timeline.makespan / built.rounds + extra,
        makespan=timeline.makespan / built.rounds,
        timeline=timeline,
        devices=tuple(devices),
        bubble=bubble,
        memory_bytes=predict_memory(config, model, optimizer, devices, costs),
        rounds=built.rounds,
        sent_per_step=sent,
    )
