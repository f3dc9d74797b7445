"""Every strategy is declared once, whole, and everything that lists strategies or their
options is derived from the declarations: a strategy added as one module plus one registry
line appears in ``dtrain run --help``, ``%dtrain?``, the notebook form, the Python API and
the summary, and trains."""

from __future__ import annotations

import json

import pytest

import workbench
from tests.strategies.toy_strategy import LoggedOneDevice
from workbench.cli.main import main
from workbench.config import ConfigError, Option, RunConfig
from workbench.launch.flags import build_parser
from workbench.strategies import STRATEGIES, StrategyDefinition, validate_config

EXPECTED = (
    "one-device",
    "mirrored",
    "sharded",
    "central-storage",
    "multi-worker-mirrored",
    "parameter-server",
    "pipeline",
    "hybrid",
    "model-parallel",
    "tensor-parallel",
    "mesh",
)


def test_every_strategy_declares_every_part():
    assert STRATEGIES.names() == EXPECTED
    help_text = build_parser().format_help()
    api_names = set()
    for definition in STRATEGIES:
        assert isinstance(definition, StrategyDefinition)
        assert definition.description and definition.description[0].islower()
        assert all(isinstance(option, Option) for option in definition.options)
        for option in definition.options:
            option.check(option.default)  # a default is an allowed value
            assert option.flag in help_text and option.help
        # Each method a run relies on is the definition's own or its family's, not missing.
        for part in ("check_config", "check_model", "device_names", "train", "summary_fields"):
            assert callable(getattr(definition, part))
        assert definition.name in help_text
        api_names.add(definition.api_name)
        assert getattr(workbench, definition.api_name).strategy == definition.name
    assert len(api_names) == len(EXPECTED)


def test_a_definition_that_lacks_a_part_is_refused_where_it_is_written():
    with pytest.raises(TypeError, match="does not declare description"):

        class Undescribed(StrategyDefinition):
            name = "undescribed"
            options = ()

    with pytest.raises(TypeError, match="abstract"):

        class Untrained(StrategyDefinition):
            name = "untrained"
            description = "no train"
            options = ()

            def check_config(self, config):
                pass

        Untrained()


def test_an_option_is_refused_by_the_strategies_that_do_not_declare_it():
    with pytest.raises(ConfigError) as raised:
        validate_config(RunConfig(strategy="pipeline", devices=2, compression="fp16"))
    assert raised.value.field == "--compression"
    assert "mirrored, central-storage, multi-worker-mirrored, parameter-server" in str(raised.value)
    filled = validate_config(RunConfig(strategy="parameter-server", devices=2))
    assert filled.options == {
        "ps": 1,
        "mode": "sync",
        "staleness": None,
        "replication": "between-graph",
        "backup_workers": 0,
        "ps_partition_min_bytes": None,
        "compression": "none",
    }


@pytest.fixture
def toy():
    STRATEGIES.register(LoggedOneDevice())  # the one registry line
    yield STRATEGIES["logged-one-device"]
    STRATEGIES.unregister("logged-one-device")


@pytest.mark.integration
def test_a_new_strategy_appears_everywhere_and_trains(toy, capsys, store_root):
    # dtrain run --help: the strategy and its option, with its default and its strategy.
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = capsys.readouterr().out
    assert "logged-one-device" in help_text
    assert "--log-every" in help_text and "record the loss every N steps" in help_text

    # dtrain run with it: the summary carries its field.
    flags = ["--strategy", "logged-one-device", "--log-every", "2", "--steps", "6"]
    assert main(["run", *flags, "--hidden", "8", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["strategy"] == "logged-one-device" and len(summary["loss_trail"]) == 3

    # Its option is refused for the others, and checked for it.
    with pytest.raises(ConfigError, match="applies to logged-one-device"):
        validate_config(RunConfig(strategy="mirrored", devices=2, log_every=2))
    with pytest.raises(ConfigError, match="--log-every: must be an integer >= 1"):
        validate_config(RunConfig(strategy="logged-one-device", log_every=0))

    # The Python API class.
    strategy = workbench.LoggedOneDeviceStrategy(log_every=3)
    with strategy.scope():
        model = workbench.Sequential(
            [workbench.Flatten(), workbench.Dense(10)], input_shape=(1, 8, 8)
        )
    result = model.fit(steps=6, batch_size=32)
    assert len(result.summary["loss_trail"]) == 2


def test_a_new_strategy_appears_in_the_magic_help_and_the_form(toy, shell):
    from workbench.notebook.panel import TrainingForm

    shell.run_line_magic("reload_ext", "workbench")  # %dtrain? is written when it loads
    magics = shell.magics_manager.registry["WorkbenchMagics"]
    assert "logged-one-device" in magics.dtrain.__doc__ and "--log-every" in magics.dtrain.__doc__
    form = TrainingForm(lambda flags: None)
    assert "logged-one-device" in form.fields["--strategy"].options
    form.fields["--strategy"].value = "logged-one-device"
    assert [widget.description for widget in form.options.children] == ["log every"]
    assert form.flags()[-2:] == ["--log-every", "1"]


def test_the_toy_strategy_reaches_the_planner_from_its_module_alone(toy, capsys):
    # Derived from one-device, it plans as its parent: the what-if table offers it, predicted.
    flags = ["--what-if-cluster", "dgx-h100,hosts=1,gpus-per-host=2", "--dataset", "synthetic"]
    assert main(["plan", *flags, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["configurations"]
    toy_rows = [row for row in rows if row["strategy"] == "logged-one-device"]
    assert len(toy_rows) == 1 and toy_rows[0]["predicted_step_ms"] > 0


def test_every_registered_strategy_says_how_the_planner_predicts_it():
    from workbench.planner.strategy_planning import StrategyPlanning, planning_of

    for name in STRATEGIES.names():
        definition = STRATEGIES[name]
        assert hasattr(type(definition), "planning"), f"{name} declares no planning"
        planning = planning_of(name)
        assert planning is None or isinstance(planning, StrategyPlanning), name
    assert planning_of("hybrid") is not None  # data x pipeline is predicted too
