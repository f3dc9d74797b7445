"""Fixtures of the runtime tests."""

import pytest

from .dask_cli import Processes


@pytest.fixture
def processes(tmp_path):
    started = Processes(tmp_path)
    yield started
    started.close()
