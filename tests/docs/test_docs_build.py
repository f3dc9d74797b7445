"""The documentation site builds as CI builds it: every warning an error, every reference
checked (links between pages, to headings, to files of the checkout, the docstrings' names),
the CLI reference rendered from the parser and the API reference from the docstrings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]

pytest.importorskip("sphinx", reason="the docs extra is not installed (pip install -e '.[docs]')")
pytest.importorskip("myst_nb", reason="the docs extra is not installed (pip install -e '.[docs]')")


def test_the_site_builds_without_a_warning(tmp_path: Path) -> None:
    site = tmp_path / "site"
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html"]
    built = subprocess.run(
        [*command, "-d", str(tmp_path / "doctrees"), "docs", str(site)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-6000:]
    cli = (site / "reference" / "cli.html").read_text()
    assert "--strategy" in cli and "--what-if" in cli  # dtrain run's and dtrain plan's own help
    api = (site / "reference" / "api.html").read_text()
    assert "workbench.distribute.Strategy" in api and "RunStore" in api
    assert (site / "tutorials" / "00-quickstart.html").is_file()
    architecture = (site / "architecture" / "index.html").read_text()
    assert "extending.html" in architecture and "prediction.html" in architecture
    assert "[Unreleased]" in (site / "changelog.html").read_text()
    assert (site / "_images" / "live-panel.png").is_file()
