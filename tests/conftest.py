"""Every test session records its runs in a run store of its own, never the user's."""

from __future__ import annotations

import os

import pytest

from workbench.store import STORE_ENVIRONMENT


@pytest.fixture(autouse=True, scope="session")
def session_run_store(tmp_path_factory):
    before = os.environ.get(STORE_ENVIRONMENT)
    os.environ[STORE_ENVIRONMENT] = str(tmp_path_factory.mktemp("run-store"))
    yield os.environ[STORE_ENVIRONMENT]
    if before is None:
        del os.environ[STORE_ENVIRONMENT]
    else:
        os.environ[STORE_ENVIRONMENT] = before
