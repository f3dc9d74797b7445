"""The run store: runs on disk (config, events, status, summary) and their exports."""

from workbench.store.exports import chrome_trace, scalars_csv, write_chrome_trace
from workbench.store.run_store import (
    STATES,
    STORE_ENVIRONMENT,
    RunRecorder,
    RunStore,
    StoredRun,
    default_store_root,
)

__all__ = [
    "STATES",
    "STORE_ENVIRONMENT",
    "RunRecorder",
    "RunStore",
    "StoredRun",
    "chrome_trace",
    "default_store_root",
    "scalars_csv",
    "write_chrome_trace",
]
