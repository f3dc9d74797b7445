"""Every test session records its runs in a run store of its own, never the user's; tests of
the notebook side get a real IPython shell with ``%load_ext workbench`` and a store of their
own."""

from __future__ import annotations

import os

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests import integration
from workbench.store import STORE_ENVIRONMENT


@pytest.hookimpl(tryfirst=True)  # before the -m filter reads the markers
def pytest_collection_modifyitems(config, items):
    integration.mark(items)


@pytest.fixture(autouse=True)
def quick_loop_guard(request, monkeypatch):
    """In the quick loop (``-m "not integration"``) an unmarked test that starts a cluster or
    a process fails, naming the marker."""
    if integration.leaves_out(request.config.option.markexpr):
        integration.guard(monkeypatch)


@pytest.fixture(autouse=True, scope="session")
def session_run_store(tmp_path_factory):
    before = os.environ.get(STORE_ENVIRONMENT)
    os.environ[STORE_ENVIRONMENT] = str(tmp_path_factory.mktemp("run-store"))
    yield os.environ[STORE_ENVIRONMENT]
    if before is None:
        del os.environ[STORE_ENVIRONMENT]
    else:
        os.environ[STORE_ENVIRONMENT] = before


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


@pytest.fixture
def cpu_double_gpus(monkeypatch, tmp_path):
    """This process and the workers it starts see ``DTRAIN_FAKE_GPUS`` (4) GPUs through the
    strict CuPy double (tests/gpu_double), with its NCCL exchanging through ``tmp_path``."""
    from tests.gpu_double.runtime import SELECTOR

    monkeypatch.setenv("DTRAIN_GPU_RUNTIME", SELECTOR)
    monkeypatch.setenv("DTRAIN_FAKE_GPUS", "4")
    monkeypatch.setenv("DTRAIN_FAKE_NCCL_DIR", str(tmp_path))
    return monkeypatch
