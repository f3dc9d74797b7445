"""A mesh configuration's predicted step, and its step split into the parts a mesh row is
ranked by: compute, the tensor group's all-reduces, the data group's all-reduce, the pipeline's
bubble, the rest of communication (the stages' hand-offs) and overhead
(docs/guide/planning.md, "Searching the mesh").
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.config import RunConfig
from workbench.planner.device_costs import DeviceCosts
from workbench.planner.memory import device_memory
from workbench.planner.mesh_memory import mesh_memory
from workbench.planner.mesh_step import DATA, TENSOR, MeshCosting, mesh_layout, mesh_step
from workbench.planner.predict import Prediction
from workbench.simulate import pipeline_bubble, simulate

MESH_PARTS = ("compute", TENSOR, DATA, "bubble", "communication", "overhead")


def predict_mesh(
    config: RunConfig, costing: MeshCosting, devices: Sequence[str]
) -> tuple[Prediction, dict[str, float]]:
    """``config``'s step (a ``mesh`` run) on ``devices`` in rank order, and its parts (which
    add up to the step). At scale the prediction holds one replica's pipeline, tensor rank 0
    of each stage: the devices it names are those."""
    costs: DeviceCosts = costing.costs
    layout = mesh_layout(config)
    step = mesh_step(costing, layout, devices)
    cores = costs.host_cores or None
    timeline = simulate(step.programs, step.link, cores, host_of=costs.host_of if cores else None)
    played = tuple(step.programs)
    makespan = timeline.makespan
    extra = costs.step_overhead_seconds
    extra += costs.dispatch_per_step(makespan + extra)
    bubble = pipeline_bubble(timeline, step.stage_devices) if layout.mesh.pp > 1 else None
    memory = {
        device: device_memory(*terms)
        for device, terms in mesh_memory(costing, layout, devices, played).items()
    }
    sent = None
    if step.closed_form_sent:
        sent = {d: timeline.bytes_sent(d) + step.closed_form_sent.get(d, 0) for d in played}
    prediction = Prediction(
        config=config,
        step_seconds=makespan + extra,
        makespan=makespan,
        timeline=timeline,
        devices=played,
        bubble=bubble,
        memory_bytes=memory,
        sent_per_step=sent,
    )
    # The busiest stage sets the pace: its compute, its rings, its hand-offs; what is left of
    # the step it waits (the pipeline's bubble).
    busiest = max(step.stage_devices, key=timeline.busy)
    compute = timeline.busy(busiest)
    tensor = step.tensor_seconds[busiest]
    data = step.data_seconds[busiest]
    handoffs = sum(
        interval.duration
        for interval in timeline.of(busiest)
        if interval.kind == "send" and interval.phase != "allreduce"
    )
    idle = max(0.0, makespan - compute - tensor - data - handoffs)
    waiting = idle if layout.mesh.pp > 1 else 0.0
    parts = {
        "compute": compute,
        TENSOR: tensor,
        DATA: data,
        "bubble": waiting,
        "communication": makespan - compute - tensor - data - waiting,
        "overhead": extra,
    }
    return prediction, parts
