"""Pipeline parallelism: the model's layers split into stages over devices, each global batch
split into micro-batches that flow through the stages.

``schedules`` holds GPipe, 1F1B, interleaved 1F1B and ZB-H1 as per-device action lists
(checked by playing them with :func:`play_schedule`, no Dask) and their theoretical bubbles
(:func:`bubble_formula`); ``stages`` splits a model into balanced stages; ``stage_worker`` runs
a stage on a Dask worker.
"""

from workbench.parallel.pipeline.schedules import (
    BACKWARD,
    FORWARD,
    INPUT_GRAD,
    SCHEDULE_NAMES,
    WEIGHT_GRAD,
    ActionCosts,
    ActionKind,
    PlayedSchedule,
    ScheduleError,
    StageAction,
    bubble_formula,
    gpipe,
    gpipe_bubble,
    interleaved_one_forward_one_backward,
    make_schedule,
    one_forward_one_backward,
    play,
    play_schedule,
    zero_bubble_h1,
)

__all__ = [
    "BACKWARD",
    "FORWARD",
    "INPUT_GRAD",
    "SCHEDULE_NAMES",
    "WEIGHT_GRAD",
    "ActionCosts",
    "ActionKind",
    "PlayedSchedule",
    "ScheduleError",
    "StageAction",
    "bubble_formula",
    "gpipe",
    "gpipe_bubble",
    "interleaved_one_forward_one_backward",
    "make_schedule",
    "one_forward_one_backward",
    "play",
    "play_schedule",
    "zero_bubble_h1",
]
