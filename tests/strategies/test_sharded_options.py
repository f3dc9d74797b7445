"""``--zero-stage``: a stage that does not exist, or the flag beside a strategy that cannot
shard, is refused naming the flag before anything starts (exit 2 on the command line)."""

import pytest

import workbench
from workbench.cli.main import main
from workbench.config import ConfigError, RunConfig
from workbench.strategies import validate_config


def test_an_unknown_stage_is_refused_naming_the_flag_and_the_stages():
    with pytest.raises(ConfigError) as raised:
        validate_config(RunConfig(strategy="sharded", devices=2, zero_stage=4))
    assert raised.value.field == "--zero-stage"
    assert "1 (optimizer state sharded), 2 (also gradients) or 3" in str(raised.value)
    with pytest.raises(ConfigError, match="--zero-stage"):
        validate_config(RunConfig(strategy="sharded", devices=2, zero_stage=0))


def test_zero_stage_with_a_strategy_that_cannot_shard_names_the_one_that_can():
    with pytest.raises(ConfigError) as raised:
        validate_config(RunConfig(strategy="mirrored", devices=2, zero_stage=2))
    assert str(raised.value) == (
        "--zero-stage: applies to sharded; strategy mirrored does not take it"
    )


def test_the_command_line_exits_2_with_the_message(capsys):
    assert main(["run", "--strategy", "sharded", "--devices", "2", "--zero-stage", "4"]) == 2
    assert "--zero-stage: must be 1" in capsys.readouterr().err


def test_the_stages_default_to_full_sharding_and_compression_is_refused():
    config = validate_config(RunConfig(strategy="sharded", devices=2))
    assert config.options == {"zero_stage": 3, "bucket_mb": 25.0}
    with pytest.raises(ConfigError) as raised:
        validate_config(RunConfig(strategy="sharded", devices=2, compression="fp16"))
    assert raised.value.field == "--compression"
    assert "strategy sharded does not take it" in str(raised.value)


def test_a_custom_training_loop_is_refused_for_sharded_which_trains_with_fit():
    with pytest.raises(ConfigError, match="sharded trains with fit") as raised:
        workbench.ShardedStrategy(devices=2).run(print)
    assert raised.value.field == "strategy"
