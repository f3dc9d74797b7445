"""Behaviour the type checker showed broken, pinned by a test of what the user sees."""

from __future__ import annotations

import socket

import pytest

from workbench.cli.doctor_command import parse_doctor_flags
from workbench.config import ConfigError


def test_doctor_cluster_flag_names_an_unreachable_scheduler() -> None:
    # `dtrain doctor --cluster ADDRESS` checks the scheduler answers before anything starts,
    # as `dtrain run --cluster` does, and names the flag when it does not.
    with socket.socket() as closed:  # a port nobody listens on: bound, never listening
        closed.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
        with pytest.raises(ConfigError, match="--cluster"):
            parse_doctor_flags(["--cluster", address, "--skip-runs"])
