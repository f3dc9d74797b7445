"""Pipeline parallelism: the model's layers split into stages over devices, each global batch
split into micro-batches that flow through the stages.

``schedules`` holds GPipe and 1F1B as per-stage action lists (checked by playing them with
:func:`play_schedule`, no Dask); ``stages`` splits a model into balanced stages;
``stage_worker`` runs a stage on a Dask worker.
"""

from workbench.parallel.pipeline.schedules import (
    SCHEDULE_NAMES,
    PlayedSchedule,
    ScheduleError,
    StageAction,
    gpipe,
    gpipe_bubble,
    make_schedule,
    one_forward_one_backward,
    play_schedule,
)

__all__ = [
    "SCHEDULE_NAMES",
    "PlayedSchedule",
    "ScheduleError",
    "StageAction",
    "gpipe",
    "gpipe_bubble",
    "make_schedule",
    "one_forward_one_backward",
    "play_schedule",
]
