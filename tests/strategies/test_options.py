"""A strategy's options are typed: one frozen dataclass per strategy, built once by validation
and read as ``config.options_of(PipelineOptions).stages``; a run config has no attribute per
option, and each option has one spelling (its row's name, in the dataclass, ``options`` and
the records alike)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass

import pytest

from workbench.config import ConfigError, Option, RunConfig, StrategyOptions
from workbench.launch.doctor import DoctorRequest, smoke_runs
from workbench.strategies import STRATEGIES, StrategyDefinition, validate_config
from workbench.strategies.options import (
    DataParallelOptions,
    HybridOptions,
    MirroredOptions,
    NoOptions,
    ParameterServerOptions,
    PipelineOptions,
)
from workbench.strategies.validation import resolve_options

# The smallest run each strategy validates (their device rules).
SHAPES = {
    "one-device": {},
    "pipeline": {"devices": 2},
    "hybrid": {"devices": 4},
    "model-parallel": {"devices": 2},
    "mesh": {"devices": 4},
}


def test_a_run_config_has_no_attribute_per_option():
    config = validate_config(RunConfig(strategy="pipeline", devices=2, microbatches=8))
    assert "__getattr__" not in vars(RunConfig)
    with pytest.raises(AttributeError):
        config.stages  # noqa: B018 (the read is the test)
    options = config.options_of(PipelineOptions)
    assert (options.stages, options.microbatches, options.schedule) == (2, 8, "gpipe")
    # Compression has one spelling: the taking strategy's typed field, in canonical form.
    mirrored = validate_config(RunConfig(strategy="mirrored", devices=2, compression="float16"))
    with pytest.raises(AttributeError):
        mirrored.compression  # noqa: B018
    assert mirrored.options_of(MirroredOptions).compression == "fp16"
    assert mirrored.options_of(DataParallelOptions).compression == "fp16"  # the family's view


def test_options_of_names_what_is_wrong():
    config = validate_config(RunConfig(strategy="hybrid", devices=4, compression="topk:0.01"))
    assert config.options_of(PipelineOptions) is config.options_of(HybridOptions)
    with pytest.raises(TypeError, match="hybrid run's options are HybridOptions, not Mirrored"):
        config.options_of(MirroredOptions)
    with pytest.raises(TypeError, match=r"not typed yet: .*validate_config"):
        RunConfig(strategy="pipeline", devices=2).options_of(PipelineOptions)


@pytest.mark.parametrize("strategy", STRATEGIES.names())
def test_every_strategy_types_each_of_its_options_once(strategy):
    definition = STRATEGIES[strategy]
    rows = {option.name: option for option in definition.options}
    fields = typing.get_type_hints(definition.options_type)
    assert set(fields) == set(rows)
    for name, row in rows.items():
        allowed = typing.get_args(fields[name])
        if row.choices is not None:  # a Literal of exactly the row's values
            assert set(allowed) == set(row.choices), name
    shape = SHAPES.get(strategy, {"devices": 2})
    config = validate_config(RunConfig(strategy=strategy, **shape))
    typed = config.options_of(definition.options_type)
    assert type(typed) is definition.options_type
    assert typed.values() == {name: row.default for name, row in rows.items()}
    # The records keep the rows' names and order (old runs' config.json still loads).
    assert list(config.options) == list(rows)
    assert {k: config.to_dict()[k] for k in rows} == dict(config.options)
    again = validate_config(RunConfig.from_dict(config.to_dict()))
    assert again.strategy_options == typed


def test_an_unknown_option_is_refused_naming_it_and_the_allowed_ones():
    with pytest.raises(ConfigError) as raised:
        validate_config(RunConfig(strategy="pipeline", devices=2, stage=2))
    assert raised.value.field == "--stage"
    assert "strategy pipeline takes: --stages, --microbatches, --schedule" in str(raised.value)
    assert str(raised.value).endswith("did you mean '--stages'?")
    with pytest.raises(ConfigError, match=r"takes: none\); did you mean '--ps'\?"):
        validate_config(RunConfig(strategy="one-device", pss=2))


def test_a_changed_option_drops_the_typed_options_until_validated_again():
    config = validate_config(RunConfig(strategy="parameter-server", devices=2, ps=2))
    assert config.replace(steps=5).options_of(ParameterServerOptions).ps == 2
    assert config.replace(ps=3).strategy_options is None
    assert config.replace(strategy="mirrored").strategy_options is None
    assert resolve_options(config.replace(ps=3)).options_of(ParameterServerOptions).ps == 3
    with pytest.raises(ConfigError, match="--ps: must be an integer >= 1"):
        resolve_options(config.replace(ps=0))


def test_a_shape_is_asked_of_its_own_strategy():
    # A parameter server's devices are its workers and its shards.
    runs = smoke_runs(DoctorRequest(devices=2, strategies=("parameter-server",)))
    assert {run.strategy: run.cluster_devices for run in runs}["parameter-server"] == 3


def test_a_definition_must_type_the_options_it_declares():
    row = Option("log_every", int, 1, "record the loss every N steps", minimum=1)
    with pytest.raises(TypeError, match="options_type NoOptions has the fields none, its options"):

        class Untyped(StrategyDefinition):
            name = "untyped"
            description = "an option without a typed field"
            options = (row,)

    @dataclass(frozen=True)
    class Misspelt(StrategyOptions):
        log_evry: int

    with pytest.raises(TypeError, match="has the fields log_evry, its options are log_every"):

        class Mistyped(StrategyDefinition):
            name = "mistyped"
            description = "a typed field that is not its option"
            options = (row,)
            options_type = Misspelt

    assert dataclasses.fields(NoOptions) == ()
