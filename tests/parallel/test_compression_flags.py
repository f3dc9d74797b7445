"""``--compression`` and ``--simulate-overflow`` at every front end: a malformed or
out-of-range value is refused by name with the allowed forms (``dtrain run`` exits 2, ``%dtrain``
raises a ``UsageError``, the Python API a ``ConfigError``) before any cluster starts, and
``%dtrain compare`` compares compression settings like it compares strategies."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from tests.parallel.conftest import no_leftover_processes  # noqa: F401 (a fixture)
from workbench.cli.main import main
from workbench.config import ConfigError, RunConfig
from workbench.notebook.compare import comparison_flag_sets
from workbench.strategies import validate_config
from workbench.strategies.options import MirroredOptions, MultiWorkerMirroredOptions

MIRRORED = ["--strategy", "mirrored", "--devices", "2"]
# (flags, the flag named, fragments of the message)
REFUSED = [
    ([*MIRRORED, "--compression", "topk:2"], "--compression", ["(0, 1]", "powersgd:RANK"]),
    ([*MIRRORED, "--compression", "topk:0"], "--compression", ["RATIO", "got 0"]),
    ([*MIRRORED, "--compression", "topk"], "--compression", ["like topk:0.01"]),
    ([*MIRRORED, "--compression", "powersgd:0"], "--compression", ["RANK", ">= 1"]),
    ([*MIRRORED, "--compression", "powersgd:two"], "--compression", ["RANK", "two"]),
    ([*MIRRORED, "--compression", "int8"], "--compression", ["unknown", "fp16 | bf16"]),
    (
        [*MIRRORED, "--allreduce", "nccl", "--compression", "topk:0.01"],
        "--compression",
        ["(index, value) pairs", "ring"],
    ),
    (
        [*MIRRORED, "--allreduce", "nccl", "--compression", "powersgd:2"],
        "--compression",
        ["P and Q", "ring"],
    ),
    (
        [*MIRRORED, "--allreduce", "nccl", "--compression", "bf16"],
        "--compression",
        ["NCCL sums in the type it moves"],
    ),
    (
        ["--strategy", "pipeline", "--devices", "2", "--compression", "fp16"],
        "--compression",
        ["mirrored, central-storage, multi-worker-mirrored"],
    ),
    ([*MIRRORED, "--simulate-overflow", "3"], "--simulate-overflow", ["fp16 or bf16", "none"]),
    (
        [*MIRRORED, "--compression", "topk:0.1", "--simulate-overflow", "3"],
        "--simulate-overflow",
        ["fp16 or bf16", "topk:0.1"],
    ),
    (["--simulate-overflow", "3"], "--simulate-overflow", ["one-device has none"]),
    ([*MIRRORED, "--simulate-overflow", "-2"], "--simulate-overflow", [">= 0", "'-2'"]),
    ([*MIRRORED, "--simulate-overflow", "x"], "--simulate-overflow", ["'x'"]),
]


@pytest.mark.parametrize(("flags", "field", "fragments"), REFUSED)
def test_dtrain_run_refuses_a_bad_compression_before_any_work(capsys, flags, field, fragments):
    assert main(["run", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dtrain run: error: {field}:"), err
    for fragment in fragments:
        assert fragment in err, err


@pytest.mark.parametrize(("flags", "field", "fragments"), REFUSED)
def test_dtrain_magic_refuses_a_bad_compression_as_a_usage_error(
    shell, store_root, flags, field, fragments
):
    magics = shell.magics_manager.registry["WorkbenchMagics"]
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("dtrain", " ".join(flags))
    message = str(raised.value)
    assert f"{field}:" in message and "Traceback" not in message
    for fragment in fragments:
        assert fragment in message
    assert not magics.runs.all()


def test_the_python_api_gets_the_same_checks_and_canonical_values():
    with pytest.raises(ConfigError) as raised:
        validate_config(RunConfig(strategy="mirrored", devices=2, compression="topk:1.5"))
    assert raised.value.field == "--compression"
    for given, canonical in [("float16", "fp16"), ("topk:1e-2", "topk:0.01"), ("bf16", "bf16")]:
        config = validate_config(RunConfig(strategy="mirrored", devices=2, compression=given))
        assert config.options_of(MirroredOptions).compression == canonical
    config = validate_config(
        RunConfig(
            strategy="central-storage", devices=2, compression="fp16", simulate_overflow=["4"]
        )
    )
    assert config.simulate_overflow == (4,)
    assert RunConfig.from_dict(config.to_dict()).simulate_overflow == (4,)
    config = validate_config(RunConfig(strategy="multi-worker-mirrored", devices=2))
    assert config.options_of(MultiWorkerMirroredOptions).compression == "none"


def test_compare_lists_the_values_of_a_comparable_flag_like_strategies():
    assert comparison_flag_sets(["mirrored", "central-storage"], ["--compression=none,fp16"]) == [
        ["--strategy", "mirrored", "--compression", "none"],
        ["--strategy", "mirrored", "--compression", "fp16"],
        ["--strategy", "central-storage", "--compression", "none"],
        ["--strategy", "central-storage", "--compression", "fp16"],
    ]
    # Other flags keep their commas (--hidden 32,16 is one value).
    assert comparison_flag_sets(["mirrored"], ["--hidden", "32,16"]) == [
        ["--strategy", "mirrored", "--hidden", "32,16"]
    ]


@pytest.mark.integration
@pytest.mark.usefixtures("no_leftover_processes")
def test_dtrain_compare_runs_each_compression_setting_and_tabulates_its_bytes(shell):
    comparison = shell.run_line_magic(
        "dtrain",
        "compare mirrored --devices 2 --steps 5 --hidden 16 --compression none,topk:0.1 --wait",
    )
    rows = comparison.rows()
    assert [(row["strategy"], row["compression"]) for row in rows] == [
        ("mirrored", "none"),
        ("mirrored", "topk:0.1"),
    ]
    assert all(row["state"] == "finished" and row["steps"] == 5 for row in rows)
    plain, sparse = rows
    assert plain["compression_ratio"] == 1.0 and sparse["compression_ratio"] > 2
    assert sparse["gradient_bytes"] == plain["gradient_bytes"] == plain["compressed_bytes"]
    assert sparse["bytes_communicated"] < plain["bytes_communicated"]
    table = comparison.table_html()
    assert "topk:0.1" in table and "compressed bytes" in table and "skipped steps" in table
