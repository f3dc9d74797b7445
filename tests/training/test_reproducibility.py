"""Same seed and flags give identical bytes; a resumed run continues bit for bit."""

import numpy as np
import pytest

from workbench.checkpoint import load_checkpoint
from workbench.cli.main import main

pytestmark = pytest.mark.integration


def _train(tmp_path, name, *flags):
    target = tmp_path / name
    assert main(["run", "--hidden", "32,16", "--save", str(target), *flags]) == 0
    return target


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_same_seed_same_flags_identical_params_bytes(tmp_path, dtype):
    first = _train(tmp_path, "a", "--steps", "40", "--dtype", dtype)
    second = _train(tmp_path, "b", "--steps", "40", "--dtype", dtype)
    assert (first / "params.npz").read_bytes() == (second / "params.npz").read_bytes()
    other = _train(tmp_path, "c", "--steps", "40", "--dtype", dtype, "--seed", "1")
    assert (first / "params.npz").read_bytes() != (other / "params.npz").read_bytes()


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_resume_continues_bit_for_bit(tmp_path, optimizer):
    # A constant learning rate: a cosine schedule depends on the total step count by design.
    common = ["--dtype", "float64", "--optimizer", optimizer, "--lr-decay", "none"]
    straight = _train(tmp_path, "straight", *common, "--steps", "70")
    half = _train(tmp_path, "half", *common, "--steps", "25")
    assert load_checkpoint(half).step == 25
    resumed = tmp_path / "resumed"
    flags = ["--hidden", "32,16", *common, "--steps", "70"]
    assert main(["run", *flags, "--resume", str(half), "--save", str(resumed)]) == 0
    a, b = load_checkpoint(straight), load_checkpoint(resumed)
    assert b.step == 70
    assert (straight / "params.npz").read_bytes() == (resumed / "params.npz").read_bytes()
    assert a.optimizer_state.keys() == b.optimizer_state.keys()
    for name in a.optimizer_state:
        np.testing.assert_array_equal(a.optimizer_state[name], b.optimizer_state[name])


def test_resume_refuses_a_different_model(tmp_path, capsys):
    saved = _train(tmp_path, "saved", "--steps", "3")
    code = main(["run", "--hidden", "64", "--steps", "6", "--resume", str(saved)])
    assert code == 2
    assert "--resume" in capsys.readouterr().err
