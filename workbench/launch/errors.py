"""The errors a user's input can cause, as the front ends catch them: every one is raised
before anything starts, and each front end reports it in its own way (``dtrain run`` exits with
status 2, ``%dtrain`` raises a ``UsageError``, the form shows it)."""

from __future__ import annotations

from workbench.checkpoint import CheckpointError
from workbench.config import ConfigError
from workbench.data import DatasetError
from workbench.models import ModelError
from workbench.runtime import DeviceError

USER_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    DatasetError,
    CheckpointError,
    DeviceError,
    ModelError,
)
