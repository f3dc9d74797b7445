"""``%dtrain`` and ``%%dtrain``: training runs from a notebook.

``%load_ext workbench`` registers them. The flags are those of ``dtrain run``, read by the same
parser and checked by the same validation, so a mistake gets the same message as on the command
line, as an IPython ``UsageError`` (no traceback) raised before anything starts. A run trains
in the background and the magic returns its handle at once.
"""

from __future__ import annotations

import importlib
import shlex
from typing import TYPE_CHECKING, Any, cast

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class

from workbench.launch.errors import USER_ERRORS
from workbench.launch.flags import build_parser, parse_plan_flags, parse_run_flags
from workbench.notebook.display import ensure_bokehjs, show

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from workbench.launch.background_run import BackgroundRun, RunTable

# The training engine, Dask, Bokeh and the widgets are imported by the magic that needs them,
# so that %load_ext answers at once; the parser, the checks and the usage text are all it needs.

SUBCOMMANDS = ("list", "stop", "status", "panel", "compare", "plan")
NOTEBOOK_FLAGS = """
notebook flags (besides those of dtrain run):
  -o NAME      store the run's handle in the variable NAME (.wait(), .stop(), .metrics, .events)
  --wait       block until the run ends (its summary is the cell's result)

subcommands:
  %dtrain list          this kernel's runs
  %dtrain status        the live runs, with step and loss
  %dtrain stop [ID]     stop run ID (a unique prefix), or every live run
  %dtrain panel         a form to start runs from widgets (same checks as the flags)
  %dtrain compare S1,S2,... [flags]
                        run the strategies one after another on the same data and steps and
                        show them side by side (loss, samples/s, bytes, busy, bubble, staleness);
                        --compression may list values too (--compression none,fp16,topk:0.01):
                        one run per strategy and value
  %dtrain plan [flags]  the run's placed and partitioned graph, drawn
  %dtrain plan --what-if [--what-if-cluster SPEC] [--memory-per-device SIZE]
                [--what-if-top K] [flags]
                        every strategy predicted for this model, batch and cluster, ranked,
                        with each one's peak memory per device (marked where it does not fit)

%%dtrain [flags]: the cell builds the model with the Python API and binds it to ``model``.
"""


def split_notebook_flags(words: list[str]) -> tuple[list[str], str | None, bool]:
    """Take ``-o NAME`` and ``--wait`` out of the words; return (the rest, NAME, wait).

    Examples
    --------
    >>> split_notebook_flags(["--devices", "2", "-o", "run", "--wait"])
    (['--devices', '2'], 'run', True)
    """
    rest, name, wait = [], None, False
    index = 0
    while index < len(words):
        word = words[index]
        if word == "-o":
            if index + 1 >= len(words) or words[index + 1].startswith("-"):
                raise UsageError("%dtrain: -o: needs a variable name, e.g. -o run")
            name = words[index + 1]
            if not name.isidentifier():
                raise UsageError(f"%dtrain: -o: {name!r} is not a Python variable name")
            index += 2
            continue
        if word == "--wait":
            wait = True
        else:
            rest.append(word)
        index += 1
    return rest, name, wait


@magics_class
class WorkbenchMagics(Magics):
    shell: InteractiveShell  # IPython registers magics with their shell, never without

    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self._runs: RunTable | None = None

    @property
    def runs(self) -> RunTable:
        """This kernel's runs (made when first asked for)."""
        if self._runs is None:
            from workbench.launch.background_run import RunTable

            self._runs = RunTable()
        return self._runs

    @runs.setter
    def runs(self, table: RunTable) -> None:
        self._runs = table

    @line_cell_magic
    def dtrain(self, line: str, cell: str | None = None) -> Any:
        try:
            words = shlex.split(line)
        except ValueError as error:
            raise UsageError(f"%dtrain: cannot split the line: {error}") from None
        if words and words[0] in SUBCOMMANDS:
            if cell is not None:
                raise UsageError(f"%%dtrain: {words[0]} takes no cell; use %dtrain {words[0]}")
            return self._subcommand(words[0], words[1:])
        if words and not words[0].startswith("-"):
            raise UsageError(
                f"%dtrain: unknown subcommand {words[0]!r}; choose one of: "
                f"{', '.join(SUBCOMMANDS)}, or give dtrain run flags (see %dtrain?)"
            )
        flags, name, wait = split_notebook_flags(words)
        run = self.start(flags, name, cell)
        return run.wait().summary if wait else run

    def start(self, flags: list[str], name: str | None, cell: str | None) -> BackgroundRun:
        """Parse, validate, build the cell's model, then start the run in the background."""
        from workbench.distribute import start

        model = self._cell_model(cell) if cell is not None else None
        register_run_panel()  # start(panel=True) builds the run's panel
        try:
            config = parse_run_flags(flags, prog="%dtrain")
            run = start(config, model, panel=True)  # the cell displays it
        except USER_ERRORS as error:
            raise UsageError(f"%dtrain: {error}") from None
        self.runs.add(run)
        if name is not None:
            self.shell.user_ns[name] = run
        return run

    def _compare(self, arguments: list[str]) -> Any:
        if not arguments or arguments[0].startswith("-"):
            raise UsageError(
                "%dtrain compare: --strategy: name the strategies first, comma-separated, "
                "e.g. %dtrain compare mirrored,parameter-server --devices 2"
            )
        from workbench.notebook.compare import Comparison, comparison_flag_sets

        strategies = [name for name in arguments[0].split(",") if name]
        flags, variable, wait = split_notebook_flags(arguments[1:])
        if "--strategy" in flags:
            raise UsageError("%dtrain compare: --strategy: the strategies are its first argument")
        try:
            configs = [
                parse_run_flags(words, prog="%dtrain compare")
                for words in comparison_flag_sets(strategies, flags)
            ]
            comparison = Comparison(configs)
        except USER_ERRORS as error:
            raise UsageError(f"%dtrain compare: {error}") from None
        if variable is not None:
            self.shell.user_ns[variable] = comparison
        return comparison.wait() if wait else comparison

    def _cell_model(self, cell: str):
        from workbench.models import Sequential

        if not cell.strip():
            raise UsageError("%%dtrain: the cell is empty; build a model and bind it to `model`")
        namespace = self.shell.user_ns
        before = namespace.get("model")
        result = self.shell.run_cell(cell, store_history=False, silent=True)
        if not result.success:
            raise UsageError(
                f"%%dtrain: the cell raised {type(result.error_in_exec).__name__}: "
                f"{result.error_in_exec}"
            )
        model = namespace.get("model")
        if not isinstance(model, Sequential) or (model is before and before is not None):
            raise UsageError(
                "%%dtrain: model: the cell must bind a new workbench Sequential to `model`, "
                f"got {type(model).__name__}"
            )
        return model

    def _plan(self, arguments: list[str]) -> Any:
        from workbench.launch.what_if import plan_what_if
        from workbench.notebook.graph_view import plan_view
        from workbench.notebook.what_if_view import WhatIfTable
        from workbench.runtime.cluster import ClusterError

        try:
            config, request = parse_plan_flags(arguments)
            if request.what_if:
                plan = plan_what_if(
                    config,
                    request.what_if_cluster,
                    print,
                    request.memory_per_device,
                    request.what_if_top,
                )
                return WhatIfTable(plan)
            return plan_view(config)
        except (*USER_ERRORS, ClusterError) as error:
            raise UsageError(f"%dtrain plan: {error}") from None

    def _subcommand(self, name: str, arguments: list[str]) -> Any:
        if name == "compare":
            return self._compare(arguments)
        if name == "plan":
            return self._plan(arguments)
        if name == "panel":
            from workbench.notebook.panel import TrainingForm, form_start

            if arguments:
                raise UsageError(f"%dtrain panel: takes no arguments, got {' '.join(arguments)}")
            show(TrainingForm(form_start(self)).widget)  # the runs it starts show charts
            return None
        if name in ("list", "status"):
            if arguments:
                raise UsageError(f"%dtrain {name}: takes no arguments, got {' '.join(arguments)}")
            runs = self.runs.all() if name == "list" else self.runs.live()
            empty = "no runs" if name == "list" else "no live runs"
            print("\n".join(run.describe() for run in runs) or empty)
            return None
        if len(arguments) > 1:
            raise UsageError(f"%dtrain stop: takes at most one run id, got {' '.join(arguments)}")
        if arguments:
            try:
                targets = [self.runs.find(arguments[0])]
            except KeyError as error:
                raise UsageError(f"%dtrain stop: {error.args[0]}") from None
        else:
            targets = self.runs.live()
        for run in targets:
            run.stop()
            print(f"stopping {run.run_id}")
        if not targets:
            print("no live runs")
        return None


def _usage() -> str:
    return build_parser("%dtrain").format_help() + NOTEBOOK_FLAGS


def register_run_panel() -> None:
    """Make the live panel a background run's view (importing the panel registers it)."""
    importlib.import_module("workbench.notebook.panel")


def _show_run(run: BackgroundRun) -> None:
    """How IPython shows a background run once the extension is loaded: its live panel."""
    register_run_panel()
    run.panel()._ipython_display_()


def load_ipython_extension(shell: Any) -> None:
    magics = WorkbenchMagics(shell)
    # A run that fit(background=True) returns shows its live panel, whose module (widgets,
    # Bokeh's models) is imported only then.
    shell.display_formatter.ipython_display_formatter.for_type_by_name(
        "workbench.launch.background_run", "BackgroundRun", _show_run
    )
    if getattr(shell, "kernel", None) is not None:  # a notebook: charts need BokehJS there
        # Here, not with the first chart: a chart shown in the cell that first puts BokehJS on
        # the page may render before BokehJS has run, and stay blank.
        ensure_bokehjs()
    # What %dtrain? shows: built on load, since the parser's help needs the registries.
    cast(Any, magics.dtrain).__func__.__doc__ = _usage()
    shell.register_magics(magics)
