"""The PyTorch pipelining peer: the reference MLP trained as a 2-stage pipeline the way
PyTorch's own ``torch.distributed.pipelining`` does it.

``torch.multiprocessing.spawn`` starts one process per stage; each joins a ``gloo`` process
group over TCP on 127.0.0.1 and holds its stage of the reference MLP's ``nn.Sequential``
(:class:`~benchmarks.torch_reference.TorchMLP`, the workbench's initial parameters), split at
the same layer as the workbench splits it (:func:`workbench.parallel.pipeline.split_layers`), in
a :class:`~torch.distributed.pipelining.PipelineStage`. The stages run ``ScheduleGPipe`` or
``Schedule1F1B`` over the same micro-batch count, with cross-entropy on the last stage and
plain SGD on each stage's parameters after every step, on synthetic tensors shaped like the
workbench's ``synthetic`` batches. Every rank first fixes glibc's malloc thresholds as every
benchmark process and workbench device does (:func:`~benchmarks.timing.steady_allocator`).
The last stage times ``steps`` steps after ``warmup`` untimed ones, a barrier on each side.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from benchmarks.ddp_reference import (
    ReferenceRun,
    finish_rank,
    initial_parameters,
    timed_peer,
)
from benchmarks.timing import steady_allocator
from benchmarks.torch_reference import import_torch

SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True)
class PipelineSettings(ReferenceRun):
    stages: int = 2
    microbatches: int = 4
    schedule: str = "gpipe"  # one of SCHEDULES


def stage_modules(settings: PipelineSettings, sequential: Any, stage: int) -> Any:
    """Stage ``stage``'s slice of the reference MLP's ``nn.Sequential`` (Linear, ReLU, ...,
    Linear): the Dense layers the workbench gives that stage, each with its ReLU."""
    from workbench.models import mlp
    from workbench.parallel.pipeline.stages import split_layers

    model = mlp((settings.inputs,), settings.classes, settings.hidden)
    layers = split_layers(model, settings.stages)[stage]
    return sequential[2 * layers.start : 2 * layers.stop]


def _train_stage(rank: int, settings: PipelineSettings, result_path: str, port: int) -> None:
    """One stage: join the group, build its PipelineStage and schedule, warm up, time."""
    steady_allocator()
    torch: Any = import_torch()  # these run only once the caller found torch installed
    torch.set_num_threads(settings.threads)
    from torch.distributed import pipelining

    from benchmarks.torch_reference import TorchMLP

    distributed = torch.distributed
    distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=settings.stages
    )
    try:
        reference = TorchMLP(initial_parameters(settings), settings.learning_rate, "cpu", torch)
        module = stage_modules(settings, reference.model, rank)
        stage = pipelining.PipelineStage(module, rank, settings.stages, torch.device("cpu"))
        schedule_class = {"gpipe": pipelining.ScheduleGPipe, "1f1b": pipelining.Schedule1F1B}
        schedule = schedule_class[settings.schedule](
            stage, settings.microbatches, loss_fn=torch.nn.functional.cross_entropy
        )
        optimizer = torch.optim.SGD(module.parameters(), lr=settings.learning_rate)
        generator = torch.Generator().manual_seed(settings.seed)
        x = torch.rand((settings.global_batch, settings.inputs), generator=generator)
        y = torch.randint(0, settings.classes, (settings.global_batch,), generator=generator)
        first, last = rank == 0, rank == settings.stages - 1
        losses: list[Any] = []

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            losses.clear()
            if first:
                schedule.step(x)
            elif last:
                schedule.step(target=y, losses=losses)
            else:
                schedule.step()
            optimizer.step()

        for _ in range(settings.warmup):
            step()
        distributed.barrier()
        start = time.perf_counter()
        for _ in range(settings.steps):
            step()
        distributed.barrier()
        seconds = time.perf_counter() - start
        if last:
            loss = sum(float(value.detach()) for value in losses) / len(losses)
            with open(result_path, "w", encoding="utf-8") as out:
                out.write(f"{seconds!r} {loss!r}")
        finish_rank(distributed)
    finally:
        if distributed.is_initialized():
            distributed.destroy_process_group()


def run_torch_pipeline(settings: PipelineSettings) -> dict[str, float]:
    """Train ``settings.steps`` timed steps on ``settings.stages`` fresh processes; returns
    ``ms_per_step``, ``samples_per_second`` (global batch over the mean step) and the last
    step's mean micro-batch loss."""
    if import_torch() is None:
        raise RuntimeError("PyTorch is not installed (pip install 'dtrain-workbench[bench]')")
    if settings.schedule not in SCHEDULES:
        allowed = ", ".join(SCHEDULES)
        raise ValueError(f"schedule must be one of {allowed}, got {settings.schedule!r}")
    if settings.global_batch % settings.microbatches:
        raise ValueError("the global batch must split evenly into micro-batches")
    return timed_peer(_train_stage, settings, settings.stages, "dtrain-pipe-")
