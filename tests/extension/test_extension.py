"""The JupyterLab extension's own checks, run from pytest so one command runs everything:
the TypeScript build (no warnings), the Jest unit tests, the Galata UI tests in chromium, and
JupyterLab's browser check with the extension installed. Each needs ``./setup.sh`` first (Node
packages, the built extension) and Debian's chromium; without them the tests fail, saying so.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "extension"
UI_TESTS = EXTENSION / "ui-tests"
BIN = Path(sys.executable).parent
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
SETUP_HINT = "run ./setup.sh (Node packages and the built extension) and install chromium"


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"
    env.setdefault("CI", "1")
    return env


def _require(*paths: Path) -> None:
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: {SETUP_HINT}", pytrace=False)


# CI sets this: there, a missing browser is a broken setup, not a reason to skip.
BROWSER_REQUIRED = os.environ.get("DTRAIN_REQUIRE_BROWSER") == "1"


def _require_chromium() -> None:
    if Path(CHROMIUM).exists() or shutil.which(CHROMIUM):
        return
    reason = (
        f"no chromium at {CHROMIUM}: setup.sh installs it with apt when it runs as root or "
        "with sudo (apt-get install chromium), then the UI tests run"
    )
    if BROWSER_REQUIRED:
        pytest.fail(f"{reason}; {SETUP_HINT}", pytrace=False)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _run(command: list[str], cwd: Path, timeout: float, **env: str) -> str:
    jlpm = str(BIN / "jlpm")
    command = [jlpm if part == "jlpm" else part for part in command]
    completed = subprocess.run(
        command,
        cwd=cwd,
        env={**_environment(), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = completed.stdout
    assert completed.returncode == 0, (
        f"{' '.join(command)} exited with {completed.returncode}:\n{output[-20000:]}"
    )
    return output


def test_typescript_builds_without_warnings():
    _require(EXTENSION / "node_modules" / ".bin" / "tsc")
    output = _run(["jlpm", "build:lib"], EXTENSION, timeout=300)
    lines = [line for line in output.splitlines() if "warning" in line.lower() or "error" in line]
    assert not lines, output


def test_jest_unit_tests():
    _require(EXTENSION / "node_modules" / ".bin" / "jest")
    output = _run(["jlpm", "test"], EXTENSION, timeout=300)
    assert "failed" not in output.split("Tests:")[-1], output


def test_extension_lint():
    # The extension template's checks: stylelint, prettier and eslint (errors fail, warnings
    # are reported), over the sources, styles and UI test specs.
    _require(EXTENSION / "node_modules" / ".bin" / "eslint")
    output = _run(["jlpm", "lint:check"], EXTENSION, timeout=300)
    assert "All matched files use Prettier code style!" in output, output


def test_galata_ui_tests():
    _require(
        UI_TESTS / "node_modules" / "@jupyterlab" / "galata", ROOT / "workbench" / "labextension"
    )
    _require_chromium()
    with tempfile.TemporaryDirectory(prefix="dtrain-ui-tests-") as store:
        output = _run(
            ["jlpm", "playwright", "test"],
            UI_TESTS,
            timeout=900,
            DTRAIN_RUN_STORE=store,
            DTRAIN_UI_TEST_PORT=str(_free_port()),
            CHROMIUM_PATH=CHROMIUM,
        )
    assert " failed" not in output, output
    # What the live test measured (lags between the views), for whoever reads the log.
    print("\n".join(line for line in output.splitlines() if "lag behind the first view" in line))


def test_jupyterlab_browser_check():
    """``python -m jupyterlab.browser_check`` itself, with the extension installed: its
    Playwright (installed by ``setup.sh``) finds Debian's chromium where it looks for its own."""
    browsers = ROOT / ".venv" / "share" / "playwright-browsers"
    _require(ROOT / "workbench" / "labextension" / "package.json", browsers)
    _require_chromium()
    environment = {key: value for key, value in _environment().items()}
    environment.pop("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD")  # the check's install must find ours
    with tempfile.TemporaryDirectory(prefix="dtrain-browser-check-") as store:
        completed = subprocess.run(
            [sys.executable, "-m", "jupyterlab.browser_check", "--ServerApp.allow_root=True"],
            cwd=ROOT,
            env={
                **environment,
                "DTRAIN_RUN_STORE": store,
                "PLAYWRIGHT_BROWSERS_PATH": str(browsers),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=300,
            check=False,
        )
    output = completed.stdout
    assert completed.returncode == 0, output[-20000:]
    assert (
        "Browser test complete" in output
        and "workbench.server | extension was successfully loaded" in output
    )
    assert "Downloading" not in output, output  # Debian's chromium, nothing from the network


def test_jupyterlab_lists_both_extensions_enabled():
    env = _environment()
    labextensions = subprocess.run(
        [str(BIN / "jupyter"), "labextension", "list"], env=env, capture_output=True, text=True
    )
    listed = labextensions.stdout + labextensions.stderr
    assert any(
        "dtrain-workbench" in line and "enabled" in line and "OK" in line
        for line in listed.splitlines()
    ), listed
    servers = subprocess.run(
        [str(BIN / "jupyter"), "server", "extension", "list"],
        env=env,
        capture_output=True,
        text=True,
    )
    listed = servers.stdout + servers.stderr
    assert any("workbench.server" in line and "enabled" in line for line in listed.splitlines()), (
        listed
    )
