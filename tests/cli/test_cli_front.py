"""What the command line answers before any command runs: its help, its version and a mistake
answer without importing Dask, Bokeh, scikit-learn or torch; a mistyped value gets the closest
allowed one, in ``dtrain`` and ``%dtrain`` alike; ``dtrain run --help`` shows the basic flags
first; Dask's benign nanny lines and large-graph warning stay out of the user's output."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
from importlib.metadata import version

import pytest
from IPython.core.error import UsageError

from workbench.cli.main import main
from workbench.config import RUN_OPTIONS
from workbench.launch.flags import build_parser
from workbench.strategies import STRATEGIES, StrategyRegistry

HEAVY = ("dask", "distributed", "bokeh", "sklearn", "torch", "tensorboardX", "jupyter_bokeh")

_NOTHING_HEAVY = """
import contextlib, io, json, sys
import workbench.cli.main
from workbench.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    statuses = [main(["--help"]), main(["--version"]), main(["run", "--bad-flag"]),
                main(["run", "--strategy", "mirored"]), main(["plan", "--allreduce", "rnig"])]
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[1].split(",")))
print(json.dumps({"statuses": statuses, "heavy": heavy}))
"""


def _answer_of(script: str, heavy: tuple[str, ...]) -> dict:
    """The JSON line ``script`` prints last, run in a fresh interpreter with ``heavy`` (the
    packages it reports having loaded) as its argument."""
    done = subprocess.run(
        [sys.executable, "-c", script, ",".join(heavy)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.integration
def test_help_version_and_mistakes_import_nothing_heavy():
    answer = _answer_of(_NOTHING_HEAVY, HEAVY)
    assert answer == {"statuses": [0, 0, 2, 2, 2], "heavy": []}


_WHAT_A_RUN_IMPORTS = """
import json, sys
import workbench.cli.export_command, workbench.distribute, workbench.launch.runner
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[1].split(",")))
print(json.dumps({"heavy": heavy}))
"""


@pytest.mark.integration
def test_a_run_without_tensorboard_files_does_not_import_pytorch():
    # tensorboardX imports PyTorch when it is installed (seconds at every run's start); only
    # writing TensorBoard files needs it.
    assert _answer_of(_WHAT_A_RUN_IMPORTS, ("torch", "tensorboardX")) == {"heavy": []}


def test_version_is_the_installed_package_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"dtrain {version('dtrain-workbench')}\n"


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--strategy", "mirored"], "did you mean 'mirrored'?"),
        (["--strategy", "mirrored", "--devices", "2", "--allreduce", "rnig"], "'ring'?"),
        (["--dataset", "digts"], "did you mean 'digits'?"),
        (["--optimizer", "adamm"], "did you mean 'adam'?"),
    ],
)
def test_a_mistyped_value_gets_the_closest_one_in_the_cli_and_the_magic(
    flags, expected, capsys, shell
):
    assert main(["run", *flags]) == 2
    cli = capsys.readouterr().err.strip()
    assert cli.startswith("dtrain run: error: ") and cli.endswith(expected)
    with pytest.raises(UsageError) as magic:
        shell.run_line_magic("dtrain", " ".join(flags))
    # The same message, from the same check, after each front end's own prefix.
    assert str(magic.value).removeprefix("%dtrain: ") == cli.removeprefix("dtrain run: error: ")


def test_the_allowed_values_stay_beside_the_suggestion(capsys):
    assert main(["run", "--strategy", "mirored"]) == 2
    error = capsys.readouterr().err
    assert f"choose one of: {', '.join(STRATEGIES.names())}; did you mean 'mirrored'?" in error
    assert main(["run", "--strategy", "zzz"]) == 2  # nothing close: no suggestion
    assert "did you mean" not in capsys.readouterr().err
    assert main(["rnu"]) == 2
    assert capsys.readouterr().err.strip().endswith("did you mean 'run'?")


def test_run_help_shows_the_basic_flags_first_then_the_advanced_groups():
    text = build_parser().format_help()
    sections = [line for line in text.splitlines() if line and not line[0].isspace()]
    titles = [line.rstrip(":") for line in sections if line.endswith(":")]
    assert titles[0] == "basic" and len(titles) >= 4
    basic = text.split("\n\n")[2]  # usage, description, then the basic group
    for flag in ("--strategy", "--devices", "--dataset", "--epochs", "--batch-size", "--json"):
        assert flag in basic
    assert "--stall-timeout" not in basic and "--allreduce" not in basic
    # Every flag is still there, and defaults read one way.
    words = " ".join(text.split())
    for option in (*RUN_OPTIONS, *STRATEGIES.options().values()):
        assert f"{option.flag} " in words
    assert "[default" not in words and "(default " not in words
    assert "default: 32)" in words and "default: one-device)" in words


def test_the_registry_lines_match_the_definitions_they_load():
    from workbench.parallel.model_parallel.graph import PLACEMENTS
    from workbench.strategies.options import BUCKET_MB, PLACEMENT

    for definition in STRATEGIES:  # loading a definition checks it against its registry line
        assert tuple(definition.options) == STRATEGIES.declared_options(definition.name)
    assert PLACEMENT.choices == PLACEMENTS
    registry = StrategyRegistry()
    registry.declare("mirrored", "workbench.strategies.mirrored:Mirrored", (BUCKET_MB,))
    assert registry.names() == ("mirrored",) and registry.takers("bucket_mb") == ("mirrored",)
    with pytest.raises(TypeError, match="unlike its registry line"):
        registry["mirrored"]


def test_dask_nanny_lines_and_the_large_graph_warning_are_dropped_errors_kept():
    from workbench.runtime.quiet_logs import quiet_dask_logs

    logger = logging.getLogger("distributed.nanny")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    try:
        quiet_dask_logs()
        quiet_dask_logs()  # twice is once
        logger.warning("Worker process still alive after 4.0 seconds, killing")
        logger.warning("Restarting worker (status=%s)", "running")
        logger.warning("Worker process 123 was killed by signal 9")
        logger.error("Restarting worker (status=%s)", "failed")
    finally:
        logger.removeHandler(handler)
    assert seen == [
        "Worker process 123 was killed by signal 9",
        "Restarting worker (status=failed)",
    ]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_dask_logs()
        for message in ("Sending large graph of size 10.23 MiB.", "something else"):
            warnings.warn_explicit(message, UserWarning, "client.py", 1, "distributed.client")
    assert [str(warning.message) for warning in caught] == ["something else"]


@pytest.mark.integration
def test_python_dash_m_workbench_is_the_dtrain_command_without_warnings():
    done = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", "workbench", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"dtrain {version('dtrain-workbench')}\n"
