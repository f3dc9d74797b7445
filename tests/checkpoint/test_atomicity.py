"""A save that fails or crashes part-way never leaves a checkpoint that loads wrong contents."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

REPO_ROOT = Path(__file__).resolve().parents[2]


def make_state(value: float, step: int) -> dict:
    return {
        "params": {
            "dense_0/kernel": np.full((8, 4), value, np.float32),
            "dense_0/bias": np.arange(4, dtype=np.float64) * value,
            "dense_1/kernel": np.full((4, 2), value, np.float16),
        },
        "optimizer_state": {"dense_0/kernel/momentum": np.full((8, 4), -value), "adam/step": 3},
        "step": step,
        "rng_state": {"seed": step},
        "config": {"value": value},
    }


OLD = make_state(1.0, step=10)
NEW = make_state(2.0, step=20)


def contents(directory: Path) -> str:
    """'old', 'new' or 'none'; anything else that loads fails the test."""
    try:
        checkpoint = load_checkpoint(directory)
    except CheckpointError:
        return "none"
    for label, state in (("old", OLD), ("new", NEW)):
        if checkpoint.step == state["step"]:
            for name, array in state["params"].items():
                assert checkpoint.params[name].tobytes() == array.tobytes(), (label, name)
            assert checkpoint.config == state["config"]
            return label
    raise AssertionError(f"{directory} loaded a checkpoint with wrong contents")


def leftovers(parent: Path, marker: str) -> list[Path]:
    return sorted(parent.glob(f".ckpt{marker}*"))


class SimulatedCrash(BaseException):
    """Raised where the process would have died; BaseException so no handler swallows it."""


def save_crashing_at(crash_at: int, target: Path, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Save NEW, 'dying' at the crash_at-th write, fsync, rename or removal.

    After the crash every later file-system mutation raises too, so clean-up code cannot run:
    the disk stays as a killed process would leave it. Returns whether the crash happened.
    """
    state = {"calls": 0, "crashed": False}

    def dying(real):
        def call(*args, **kwargs):
            if not state["crashed"]:
                state["calls"] += 1
                state["crashed"] = state["calls"] == crash_at
            if state["crashed"]:
                raise SimulatedCrash
            return real(*args, **kwargs)

        return call

    with monkeypatch.context() as patch:
        for module, name in [
            (np.lib.format, "write_array"),
            (os, "fsync"),
            (os, "replace"),
            (shutil, "rmtree"),
        ]:
            patch.setattr(module, name, dying(getattr(module, name)))
        try:
            save_checkpoint(target, **NEW)
        except SimulatedCrash:
            return True
    return False


@pytest.mark.parametrize("has_previous", [True, False])
def test_a_crash_at_any_point_leaves_old_new_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_previous: bool
) -> None:
    outcomes = []
    for crash_at in range(1, 50):
        parent = tmp_path / f"crash-{crash_at}"
        target = parent / "ckpt"
        if has_previous:
            save_checkpoint(target, **OLD)
        crashed = save_crashing_at(crash_at, target, monkeypatch)

        outcomes.append(contents(target))
        for temporary in leftovers(parent, ".tmp-"):
            with pytest.raises(CheckpointError, match="temporary directory"):
                load_checkpoint(temporary)
        # Whatever a crash left behind, the next save goes through.
        save_checkpoint(target, **NEW)
        assert contents(target) == "new"
        if not crashed:
            break
    else:
        pytest.fail("save_checkpoint never completed")

    # Outcomes only ever move forward: old ... (none ...) new; never back, never mixed.
    first = ["old"] if has_previous else []
    order = {"old": 0, "none": 1, "new": 2}
    assert outcomes == sorted(outcomes, key=order.__getitem__)
    assert outcomes[: len(first)] == first and outcomes[-1] == "new"
    assert len(outcomes) >= 8  # every write, fsync and rename was a crash point
    if has_previous:
        # No checkpoint at all only in the instant between moving the old one aside and the
        # new one in; in particular the old one survives every crash while writing.
        assert outcomes.count("none") <= 1


def test_a_failed_rename_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "ckpt"
    save_checkpoint(target, **OLD)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    real_replace = os.replace
    failed = []

    def replace(source, destination):
        # Fail the rename that moves the new checkpoint in, once.
        if Path(destination) == target and ".tmp-" in Path(source).name and not failed:
            failed.append(source)
            raise OSError(errno.EIO, "simulated I/O error")
        return real_replace(source, destination)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="simulated I/O error"):
        save_checkpoint(target, **NEW)

    assert failed
    assert contents(target) == "old"
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


@pytest.mark.parametrize("has_previous", [True, False])
def test_a_failed_write_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_previous: bool
) -> None:
    target = tmp_path / "ckpt"
    if has_previous:
        save_checkpoint(target, **OLD)
    real_write = np.lib.format.write_array
    writes = []

    def write_array(stream, array, **kwargs):
        writes.append(array.shape)
        if len(writes) == 4:  # the first optimizer array: params.npz is already complete
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(stream, array, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", write_array)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint(target, **NEW)

    assert contents(target) == ("old" if has_previous else "none")
    assert [p.name for p in tmp_path.iterdir()] == (["ckpt"] if has_previous else [])


@pytest.mark.integration
def test_a_killed_process_between_the_renames_loses_nothing(tmp_path: Path) -> None:
    """A real crash (os._exit) after the old checkpoint was moved aside, before the new one
    moved in: nothing loads at the target, the error says where the old one is, and renaming
    it back recovers it exactly."""
    target = tmp_path / "ckpt"
    save_checkpoint(target, **OLD)
    child = (
        "import os, sys\n"
        "import numpy as np\n"
        "from workbench.checkpoint import save_checkpoint\n"
        "real_replace, calls = os.replace, []\n"
        "def replace(source, destination):\n"
        "    calls.append(source)\n"
        "    if len(calls) == 2:\n"
        "        os._exit(86)\n"
        "    real_replace(source, destination)\n"
        "os.replace = replace\n"
        "save_checkpoint(sys.argv[1], params={'w': np.ones(3)}, optimizer_state={},\n"
        "                step=99, rng_state={}, config={})\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *sys.path])}
    result = subprocess.run(
        [sys.executable, "-c", child, str(target)], env=env, capture_output=True, timeout=60
    )
    assert result.returncode == 86, result.stderr.decode()

    assert not target.exists()
    [aside] = leftovers(tmp_path, ".old-")
    with pytest.raises(CheckpointError, match=f"previous checkpoint at {aside}"):
        load_checkpoint(target)
    [temporary] = leftovers(tmp_path, ".tmp-")
    with pytest.raises(CheckpointError, match="temporary directory"):
        load_checkpoint(temporary)

    aside.rename(target)
    assert contents(target) == "old"
