"""``--tensorboard DIR``: a run's TensorBoard event files, written while it trains, into a
folder of its own under DIR (named by its run id, else by its start time and strategy)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from workbench.config import RunConfig
from workbench.events import EventLog
from workbench.events.tensorboard import TensorBoardWriter, fresh_directory
from workbench.runtime.devices import device_tag
from workbench.training.job import Progress, TrainingJob


class LiveTensorBoard:
    """The TensorBoard files of one run, fed by its event log; :meth:`close` ends them (with
    the run's summary once it has one). Does nothing for a run without ``--tensorboard``."""

    def __init__(self, writer: TensorBoardWriter | None) -> None:
        self.writer = writer

    @classmethod
    def attach(
        cls,
        config: RunConfig,
        job: TrainingJob,
        log: EventLog,
        progress: Progress,
        run_name: str | None = None,
    ) -> LiveTensorBoard:
        if config.tensorboard is None:
            return cls(None)
        name = run_name or f"{time.strftime('%Y%m%d-%H%M%S')}-{config.strategy}"
        writer = TensorBoardWriter(
            fresh_directory(config.tensorboard, name),
            config.to_dict(),
            batch_size=config.batch_size,
            device_label=device_tag,
            time_origin=job.clock_origin,  # event times count from here
        )
        log.subscribe(writer.write)
        progress(f"[tensorboard] writing to {writer.directory}")
        return cls(writer)

    def close(self, summary: Mapping[str, Any] | None = None) -> None:
        if self.writer is not None:
            self.writer.close(summary)
