"""Malformed ``%dtrain`` invocations: each is an IPython ``UsageError`` (shown without a
traceback) that names the offending argument and, where there is a fixed set, the allowed
values; nothing starts, nothing is stored, no thread is left."""

from __future__ import annotations

import shlex
import threading

import pytest
from IPython.core.error import UsageError

from workbench.config import RUN_OPTIONS
from workbench.launch.flags import build_parser
from workbench.notebook.magics import SUBCOMMANDS
from workbench.strategies import STRATEGIES

# (line, cell or None, what the message must contain)
MALFORMED = [
    ("--strategy nope", None, ["--strategy", "mirrored", "parameter-server"]),
    ("--strategy", None, ["--strategy", "expected one argument"]),
    ("--strategy mirrored --allreduce star", None, ["--allreduce", "ring", "reduce-to-one"]),
    ("--devices 0", None, ["--devices"]),
    ("--checkpoint-every 0", None, ["--checkpoint-every", ">= 1"]),
    ("--max-restarts -1", None, ["--max-restarts", ">= 0"]),
    ("--replacement-timeout soon", None, ["--replacement-timeout", "'soon'"]),
    (
        "--strategy mirrored --devices 2 --simulate-straggler task:5=3",
        None,
        ["--simulate-straggler", "task:5", "task:0, task:1"],
    ),
    ("--simulate-straggler slow", None, ["--simulate-straggler", "DEVICE=FACTOR"]),
    (
        "--strategy parameter-server --devices 2 --backup-workers 2",
        None,
        ["--backup-workers", "0 to 1"],
    ),
    ("--strategy pipeline --devices 2 --elastic", None, ["--elastic", "mirrored"]),
    (
        "--strategy parameter-server --ps-partition-min-bytes -5",
        None,
        ["--ps-partition-min-bytes", ">= 0"],
    ),
    (
        "--strategy pipeline --devices 2 --replication in-graph",
        None,
        ["--replication", "mirrored, central-storage, parameter-server"],
    ),
    ("--devices -3", None, ["--devices"]),
    ("--devices two", None, ["--devices", "'two'"]),
    ("--devices 2.5", None, ["--devices", "'2.5'"]),
    ("--strategy one-device --devices 2", None, ["--devices"]),
    ("--strategy mirrored --devices 2 --batch-size 7", None, ["--batch-size", "7"]),
    ("--model resnet", None, ["--model", "mlp", "cnn"]),
    ("--hidden 0", None, ["--hidden"]),
    ("--hidden a,b", None, ["--hidden", "512,512"]),
    ("--hidden 16,-4", None, ["--hidden"]),
    ("--dataset imagenet", None, ["--dataset", "digits"]),
    ("--dataset mnist:/no/such/dir", None, ["--dataset", "/no/such/dir"]),
    ("--epochs 0", None, ["--epochs"]),
    ("--epochs x", None, ["--epochs", "'x'"]),
    ("--steps 0", None, ["--steps"]),
    ("--steps -1", None, ["--steps"]),
    ("--epochs 1 --steps 5", None, ["--epochs", "--steps"]),
    ("--batch-size 0", None, ["--batch-size"]),
    ("--batch-size many", None, ["--batch-size", "'many'"]),
    ("--lr -1", None, ["--lr"]),
    ("--lr 0", None, ["--lr"]),
    ("--lr abc", None, ["--lr", "'abc'"]),
    ("--optimizer rmsprop", None, ["--optimizer", "sgd", "adam"]),
    ("--seed -1", None, ["--seed"]),
    ("--seed x", None, ["--seed"]),
    ("--dtype float8", None, ["--dtype", "float32", "float64"]),
    ("--precision fp8", None, ["--precision", "fp32", "mixed-fp16", "mixed-bf16"]),
    ("--accumulate 0", None, ["--accumulate"]),
    ("--accumulate x", None, ["--accumulate", "'x'"]),
    ("--strategy sharded --devices 2 --zero-stage 4", None, ["--zero-stage", "got 4"]),
    ("--recompute dense_7", None, ["--recompute", "'dense_7'", "flatten_0, dense_0"]),
    ("--strategy parameter-server --devices 2 --ps 0", None, ["--ps"]),
    ("--mode sometimes", None, ["--mode", "sync", "async"]),
    ("--staleness -1 --mode async", None, ["--staleness"]),
    ("--staleness 2", None, ["--staleness", "--mode async"]),
    ("--replication sideways", None, ["--replication", "in-graph", "between-graph"]),
    ("--stages 0", None, ["--stages"]),
    ("--microbatches 0", None, ["--microbatches"]),
    ("--strategy pipeline --devices 2 --microbatches 0", None, ["--microbatches"]),
    ("--strategy hybrid --devices 4 --stages 0", None, ["--stages"]),
    ("--strategy tensor-parallel --devices 2 --tp 0", None, ["--tp"]),
    ("--schedule zigzag", None, ["--schedule", "gpipe", "1f1b"]),
    ("--strategy pipeline --devices 2 --virtual-stages 0", None, ["--virtual-stages"]),
    (
        "--strategy model-parallel --placement random",
        None,
        ["--placement", "greedy", "balanced-params", "manual"],
    ),
    ("--device-type tpu", None, ["--device-type", "cpu", "gpu"]),
    ("--protocol udp", None, ["--protocol", "tcp", "ucx"]),
    (
        "--strategy mirrored --devices 2 --protocol ucx --cluster tcp://127.0.0.1:9",
        None,
        ["--protocol", "already uses its own"],
    ),
    (
        "--strategy mirrored --devices 2 --allreduce nccl --compression fp16",
        None,
        ["--compression", "NCCL sums in the type it moves"],
    ),
    ("--warmup-steps -1", None, ["--warmup-steps"]),
    ("--lr-scaling square", None, ["--lr-scaling", "linear"]),
    ("--lr-decay exp", None, ["--lr-decay", "cosine"]),
    ("--bucket-mb 0", None, ["--bucket-mb"]),
    ("--strategy mirrored --devices 2 --compression int8", None, ["--compression", "fp16"]),
    (
        "--strategy mirrored --devices 2 --compression topk:2",
        None,
        ["--compression", "(0, 1]", "powersgd:RANK"],
    ),
    ("--compression fp16", None, ["--compression", "mirrored"]),
    ("--strategy mesh --devices 4 --mesh dp=2,tq=2", None, ["--mesh", "dp, tp, pp"]),
    (
        "--strategy mirrored --devices 2 --simulate-overflow 3",
        None,
        ["--simulate-overflow", "fp16 or bf16"],
    ),
    ("--simulate-overflow -1", None, ["--simulate-overflow", ">= 0"]),
    ("--hosts 0", None, ["--hosts"]),
    ("--stall-timeout 0", None, ["--stall-timeout"]),
    ("--save /dev/null", None, ["--save", "/dev/null", "not a directory"]),
    ("--tensorboard /dev/null", None, ["--tensorboard", "/dev/null", "not a directory"]),
    ("--resume /no/such/checkpoint", None, ["--resume", "manifest.json"]),
    ("--frobnicate", None, ["--frobnicate", "unknown flag"]),
    (
        "--strategy mirrored --devices 2 --cluster tcp://127.0.0.1:9",
        None,
        ["--cluster", "cannot reach"],
    ),
    ("--cluster tcp://127.0.0.1:9", None, ["--cluster", "one-device runs in this process"]),
    (
        "--strategy mirrored --devices 2 --cluster tcp://127.0.0.1:9 --scheduler-file s.json",
        None,
        ["--scheduler-file", "give one of them"],
    ),
    (
        "--strategy mirrored --devices 2 --wait-for-workers 30",
        None,
        ["--wait-for-workers", "--cluster or --scheduler-file"],
    ),
    ("--wait-for-workers soon", None, ["--wait-for-workers", "'soon'"]),
    (
        "--strategy mirrored --devices 2 --cluster tls://127.0.0.1:9 --tls-ca-file /no/ca.pem",
        None,
        ["--tls-ca-file", "/no/ca.pem", "is not a file"],
    ),
    ("--strategy mirrored --devices 2 --tls-cert c.pem", None, ["--tls-cert", "tls://"]),
    ("--strategy mirrored --devices 2 --tls-key k.pem", None, ["--tls-key", "tls://"]),
    ("--device 2", None, ["--device", "did you mean --devices"]),
    ("--steps 3 extra", None, ["extra"]),
    ("garbage", None, ["'garbage'", "list", "stop", "status"]),
    ("--dataset 'unterminated", None, ["cannot split"]),
    ("-o", None, ["-o", "variable name"]),
    ("-o 1abc", None, ["-o", "'1abc'"]),
    ("-o --steps 3", None, ["-o", "variable name"]),
    ("list extra", None, ["list", "no arguments"]),
    ("status now", None, ["status", "no arguments"]),
    ("stop a b", None, ["stop", "at most one"]),
    ("stop nosuchrun", None, ["stop", "'nosuchrun'", "matches no run"]),
    ("panel now", None, ["panel", "no arguments"]),
    ("compare --devices 2", None, ["compare", "name the strategies first"]),
    ("plan --what-if-cluster dgx-h900", None, ["plan", "--what-if-cluster", "dgx-h900"]),
    ("plan --memory-per-device lots", None, ["plan", "--memory-per-device", "'lots'", "GiB"]),
    ("plan --what-if-top 0", None, ["plan", "--what-if-top", "'0'", "whole number >= 1"]),
    ("plan --strategy one-device", None, ["plan", "--strategy", "model-parallel"]),
    ("list", "x = 1", ["list", "takes no cell"]),
    ("--steps 3", "", ["cell body is empty"]),  # IPython's own check
    ("--steps 3", "   \n  ", ["cell is empty"]),
    ("--steps 3", "model = 42", ["model", "Sequential", "int"]),
    ("--steps 3", "x = 1", ["model", "Sequential"]),
    ("--steps 3", "raise ValueError('broken cell')", ["ValueError", "broken cell"]),
    (
        "--steps 3",
        "from workbench import Dense, Sequential\n"
        "model = Sequential([Dense(10)], input_shape=(5,))",
        ["model", "(5,)", "digits"],
    ),
]


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:  # the case of a line the magic cannot split
        return line.split()


def _value_flags() -> dict[str, str]:
    """Every flag of the parser behind ``%dtrain`` that takes a value, with its help text.
    Flags without a value (``--help``, ``--json``) cannot be given a malformed one."""
    return {
        option: action.help or ""
        for action in build_parser("%dtrain")._actions
        if action.nargs != 0
        for option in action.option_strings
    }


def test_every_flag_the_parser_knows_has_a_malformed_case():
    # Derived from the parser, not from this table: a flag added to ``dtrain run`` without a
    # case here (or a case whose message need not name its flag) fails this test.
    named = {
        flag
        for line, _, expected in MALFORMED
        for flag in _value_flags()
        if flag in _words(line) and flag in expected
    }
    assert set(_value_flags()) - named == set()


def test_every_fixed_set_flag_has_a_case_naming_an_allowed_value():
    # The option rows behind the parser give each fixed set of values; a mistake must be
    # answered with the allowed values, so some case for each such flag expects one of them.
    fixed = {option.flag: set(option.choices) for option in RUN_OPTIONS if option.choices}
    fixed.update(
        (option.flag, set(option.choices))
        for option in STRATEGIES.options().values()
        if option.choices
    )
    fixed["--strategy"] = set(STRATEGIES.names())
    assert set(fixed) <= set(_value_flags())
    for flag, allowed in fixed.items():
        cases = [expected for line, _, expected in MALFORMED if flag in _words(line)]
        assert any(allowed & set(expected) for expected in cases), (flag, allowed)


def test_every_subcommand_has_a_malformed_case():
    first_words = {_words(line)[0] for line, _, _ in MALFORMED}
    assert set(SUBCOMMANDS) - first_words == set()


@pytest.mark.parametrize(("line", "cell", "expected"), MALFORMED)
def test_a_malformed_invocation_is_a_usage_error_naming_the_argument(
    shell, store_root, line, cell, expected
):
    magics = shell.magics_manager.registry["WorkbenchMagics"]
    shell.user_ns.pop("model", None)
    threads = threading.active_count()
    with pytest.raises(UsageError) as raised:
        if cell is None:
            shell.run_line_magic("dtrain", line)
        else:
            shell.run_cell_magic("dtrain", line, cell)
    message = str(raised.value)
    for text in expected:
        assert text in message, f"{text!r} not in {message!r}"
    assert "Traceback" not in message
    assert not magics.runs.all()
    assert not store_root.exists() or not any(store_root.iterdir())
    assert threading.active_count() == threads
