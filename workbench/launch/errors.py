"""The errors a user's input can cause, as the front ends catch them: every one is raised
before anything starts, and each front end reports it in its own way (``dtrain run`` exits with
status 2, ``%dtrain`` raises a ``UsageError``, the form shows it). A :class:`StoreError` may
also come later, when the run store cannot record a run (a full disk): the run then ends
failed, and the front end reports it the same way."""

from __future__ import annotations

from workbench.checkpoint import CheckpointError
from workbench.config import ConfigError
from workbench.data import DatasetError
from workbench.models import ModelError
from workbench.runtime import DeviceError
from workbench.store import StoreError

USER_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    DatasetError,
    CheckpointError,
    DeviceError,
    ModelError,
    StoreError,
)
