"""The run store: runs on disk (config, events, status, summary) and their exports; the
run-id rule every front end applies; listings that flag damaged and lost runs instead of
failing (docs/security/store.md, "Run store")."""

from workbench.store.entries import DAMAGED, RunEntry
from workbench.store.errors import StoreError
from workbench.store.exports import chrome_trace, scalars_csv, write_chrome_trace
from workbench.store.liveness import lost_reason, process_uid, run_state
from workbench.store.run_ids import MAX_RUN_ID_LENGTH, RUN_ID_PATTERN, RUN_ID_RULE, valid_run_id
from workbench.store.run_store import (
    STATES,
    STORE_ENVIRONMENT,
    RunRecorder,
    RunStore,
    StoredRun,
    default_store_root,
)

__all__ = [
    "DAMAGED",
    "MAX_RUN_ID_LENGTH",
    "RUN_ID_PATTERN",
    "RUN_ID_RULE",
    "STATES",
    "STORE_ENVIRONMENT",
    "RunEntry",
    "RunRecorder",
    "RunStore",
    "StoreError",
    "StoredRun",
    "chrome_trace",
    "default_store_root",
    "lost_reason",
    "process_uid",
    "run_state",
    "scalars_csv",
    "valid_run_id",
    "write_chrome_trace",
]
