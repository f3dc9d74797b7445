"""The PyTorch pipelining peer trains the workbench's stages: the same layers on each stage."""

from __future__ import annotations

import pytest

from benchmarks.pipeline_reference import PipelineSettings, run_torch_pipeline, stage_modules
from benchmarks.torch_reference import TorchMLP, import_torch
from workbench.models import mlp
from workbench.parallel.pipeline.stages import build_stage_graphs, split_layers

torch = import_torch()
pytestmark = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


def test_each_torch_stage_holds_the_dense_layers_the_workbench_gives_that_stage():
    settings = PipelineSettings(hidden=(512, 512))
    model = mlp((settings.inputs,), settings.classes, settings.hidden)
    reference = TorchMLP(model.init_parameters(0, "float32"), settings.learning_rate, "cpu", torch)
    for stage, layers in enumerate(split_layers(model, settings.stages)):
        graphs = build_stage_graphs(model, layers, 64, "float32", stage == 0, stage == 1)
        kernels = [
            tuple(reversed(linear.weight.shape))
            for linear in stage_modules(settings, reference.model, stage)
            if isinstance(linear, torch.nn.Linear)
        ]
        shapes = model.parameter_shapes()
        assert kernels == [shapes[n] for n in graphs.parameter_names if n.endswith("kernel")]


@pytest.mark.integration
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_peer_trains_two_stages_and_reports_its_step(schedule):
    settings = PipelineSettings(
        schedule=schedule, global_batch=8, hidden=(4, 4), inputs=6, steps=2, warmup=1
    )
    figures = run_torch_pipeline(settings)
    assert figures["ms_per_step"] > 0 and figures["final_loss"] > 0
    assert figures["samples_per_second"] == pytest.approx(8e3 / figures["ms_per_step"])


def test_a_schedule_the_peer_lacks_is_refused_before_any_process_starts():
    with pytest.raises(ValueError, match="schedule must be one of gpipe, 1f1b"):
        run_torch_pipeline(PipelineSettings(schedule="zero-bubble"))
