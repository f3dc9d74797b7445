"""A real IPython shell with ``%load_ext workbench`` (as in tests/notebook), for the form and
``%dtrain?`` of a strategy registered by a test."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from workbench.store import STORE_ENVIRONMENT


@pytest.fixture
def store_root(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    monkeypatch.setenv(STORE_ENVIRONMENT, str(root))
    return root


@pytest.fixture
def shell(store_root):
    shell = InteractiveShell.instance()
    if "WorkbenchMagics" not in shell.magics_manager.registry:
        shell.run_line_magic("load_ext", "workbench")
    magics = shell.magics_manager.registry["WorkbenchMagics"]
    yield shell
    for run in magics.runs.live():  # a failed test must not leave a run training
        run.stop()
        run.wait(60)
    magics.runs = type(magics.runs)()
