"""``%load_ext workbench`` answers at once: it imports neither Dask nor the widgets nor the
training engine (each magic imports what it needs), and Bokeh only in a notebook, where charts
need BokehJS on the page before the first one is shown; a background run still shows its live
panel."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from workbench.launch.background_run import BackgroundRun
from workbench.launch.flags import parse_run_flags

pytestmark = pytest.mark.integration

_LOAD = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
if sys.argv[2] == "kernel":
    shell.kernel = object()  # a notebook's shell has a kernel: charts need BokehJS there
shell.run_line_magic("load_ext", "workbench")
heavy = set(sys.argv[1].split(","))
magics = shell.magics_manager.registry["WorkbenchMagics"]
usage = magics.dtrain.__doc__
import workbench.notebook.display as display
print(json.dumps({
    "heavy": sorted({name.split(".")[0] for name in sys.modules} & heavy),
    "basic_first": usage.index("basic:") < usage.index("strategy options"),
    "notebook_flags": "notebook flags" in usage,
    "bokehjs": display._loaded,
}))
"""
HEAVY = ("dask", "distributed", "sklearn", "torch", "tensorboardX", "ipywidgets", "jupyter_bokeh")


def _load_ext(shell: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _LOAD, ",".join((*HEAVY, "bokeh")), shell],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_load_ext_imports_nothing_heavy_and_puts_bokehjs_on_a_notebook_page():
    answer = {"basic_first": True, "notebook_flags": True}
    assert _load_ext("terminal") == {"heavy": [], "bokehjs": False, **answer}
    assert _load_ext("kernel") == {"heavy": ["bokeh"], "bokehjs": True, **answer}


def test_a_background_run_shown_after_load_ext_shows_its_panel(shell):
    run = BackgroundRun(parse_run_flags(["--steps", "2", "--hidden", "8"]), begin=False)
    shell.display_formatter.format(run)
    assert run._panel is not None and type(run._panel).__name__ == "RunPanel"
    assert run.begin().wait(60).summary["steps"] == 2  # its panel stops refreshing when done
