"""Round trips, overwriting, and what save_checkpoint refuses before writing anything."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from workbench.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint


def make_state(seed: int) -> dict:
    """A small training state with every dtype the trainers use and layer-path names."""
    rng = np.random.default_rng(seed)
    kernel = rng.standard_normal((4, 3)).astype(np.float32)
    kernel[0, 0] = np.nan  # bit-exactness must hold for NaN payloads and signed zeros too
    kernel[0, 1] = -0.0
    return {
        "params": {
            "dense_0/kernel": kernel,
            "dense_0/bias": rng.standard_normal(3).astype(np.float16),
            "block_1/conv/kernel": rng.standard_normal((2, 2, 3, 5)),  # float64
            "embedding/ids": rng.integers(-(2**62), 2**62, size=(5,), dtype=np.int64),
            "head/scale": np.float64(seed + 0.5),  # a 0-d array
            "head/empty": np.zeros((0, 3), np.float32),
            "legacy/big_endian": np.arange(4, dtype=">f8"),
        },
        "optimizer_state": {
            "dense_0/kernel/momentum": rng.standard_normal((4, 3)).astype(np.float32),
            "adam/step": np.int64(100 + seed),
        },
        "step": 100 + seed,
        # PCG64's state holds 128-bit integers; JSON must carry them exactly.
        "rng_state": {"numpy": np.random.default_rng(seed).bit_generator.state},
        "config": {"model": "mlp", "lr": 0.1, "layers": [4, 3], "seed": seed, "nested": {}},
    }


def assert_arrays_identical(actual: dict, expected: dict) -> None:
    assert list(actual) == list(expected)
    for name, want in expected.items():
        got = actual[name]
        want = np.asarray(want)
        assert got.dtype == want.dtype, name
        assert got.shape == want.shape, name
        assert got.tobytes() == want.tobytes(), name


def assert_matches(checkpoint: Checkpoint, state: dict) -> None:
    assert_arrays_identical(checkpoint.params, state["params"])
    assert_arrays_identical(checkpoint.optimizer_state, state["optimizer_state"])
    assert checkpoint.step == state["step"]
    assert checkpoint.rng_state == state["rng_state"]
    assert checkpoint.config == state["config"]


def test_round_trip_is_bit_exact(tmp_path: Path) -> None:
    state = make_state(0)
    path = save_checkpoint(tmp_path / "ckpt", **state)

    assert path == (tmp_path / "ckpt").absolute()
    assert sorted(p.name for p in path.iterdir()) == [
        "manifest.json",
        "optimizer.npz",
        "params.npz",
    ]
    assert_matches(load_checkpoint(path), state)


def test_restored_rng_state_continues_the_same_stream(tmp_path: Path) -> None:
    generator = np.random.default_rng(7)
    generator.random(10)
    state = {**make_state(0), "rng_state": generator.bit_generator.state}
    expected_next = generator.random(3)

    checkpoint = load_checkpoint(save_checkpoint(tmp_path / "ckpt", **state))
    restored = np.random.default_rng()
    restored.bit_generator.state = checkpoint.rng_state
    np.testing.assert_array_equal(restored.random(3), expected_next)


def test_loaded_arrays_are_plain_writable_numpy_arrays(tmp_path: Path) -> None:
    checkpoint = load_checkpoint(save_checkpoint(tmp_path / "ckpt", **make_state(1)))
    for array in [*checkpoint.params.values(), *checkpoint.optimizer_state.values()]:
        assert type(array) is np.ndarray
        assert array.flags.writeable
    checkpoint.params["dense_0/kernel"][...] = 0.0


def test_archives_open_with_plain_numpy_load(tmp_path: Path) -> None:
    state = make_state(2)
    path = save_checkpoint(tmp_path / "ckpt", **state)
    with np.load(path / "params.npz", allow_pickle=False) as archive:
        assert sorted(archive.files) == sorted(state["params"])
        np.testing.assert_array_equal(archive["dense_0/kernel"], state["params"]["dense_0/kernel"])
    with np.load(path / "optimizer.npz", allow_pickle=False) as archive:
        assert archive["adam/step"] == 102


def test_manifest_describes_files_and_arrays(tmp_path: Path) -> None:
    state = make_state(3)
    path = save_checkpoint(tmp_path / "ckpt", **state)
    manifest = json.loads((path / "manifest.json").read_text())

    assert manifest["format"] == "dtrain-checkpoint"
    assert manifest["format_version"] == 1
    assert manifest["step"] == state["step"]
    for name in ("params.npz", "optimizer.npz"):
        data = (path / name).read_bytes()
        assert manifest["files"][name] == {
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
        }
    assert manifest["params"]["dense_0/kernel"] == {"shape": [4, 3], "dtype": "float32"}
    assert manifest["params"]["head/scale"] == {"shape": [], "dtype": "float64"}
    assert manifest["optimizer_state"]["adam/step"] == {"shape": [], "dtype": "int64"}
    assert load_checkpoint(path).manifest == manifest


def test_overwrite_replaces_the_old_checkpoint_and_leaves_nothing_behind(tmp_path: Path) -> None:
    old, new = make_state(4), make_state(5)
    new["params"].pop("dense_0/bias")  # a smaller model: no stale array may survive
    save_checkpoint(tmp_path / "ckpt", **old)
    save_checkpoint(tmp_path / "ckpt", **new)

    assert_matches(load_checkpoint(tmp_path / "ckpt"), new)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_same_state_saves_identical_bytes(tmp_path: Path) -> None:
    state = make_state(6)
    first = save_checkpoint(tmp_path / "a", **state)
    second = save_checkpoint(tmp_path / "b", **state)
    for name in ("params.npz", "optimizer.npz", "manifest.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()


def test_missing_parent_directories_are_created(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "runs" / "mlp" / "step-100", **make_state(7))
    assert load_checkpoint(path).step == 107


def test_an_existing_empty_directory_is_used(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    assert load_checkpoint(save_checkpoint(tmp_path / "ckpt", **make_state(8))).step == 108


@pytest.mark.parametrize(
    "user_files",
    [["notes.txt"], ["manifest.json", "notes.txt"], ["params.npz"], ["data/"]],
)
def test_refuses_to_replace_a_directory_that_is_not_a_checkpoint(
    tmp_path: Path, user_files: list[str]
) -> None:
    target = tmp_path / "results"
    target.mkdir()
    for name in user_files:
        if name.endswith("/"):
            (target / name).mkdir()
        else:
            (target / name).write_text("precious")

    with pytest.raises(CheckpointError, match="is not a checkpoint") as caught:
        save_checkpoint(target, **make_state(0))
    assert str(target) in str(caught.value)
    assert sorted(p.name for p in target.iterdir()) == sorted(n.rstrip("/") for n in user_files)
    assert [p.name for p in tmp_path.iterdir()] == ["results"]


def test_refuses_to_replace_a_file(tmp_path: Path) -> None:
    (tmp_path / "ckpt").write_text("precious")
    with pytest.raises(CheckpointError, match="not a directory"):
        save_checkpoint(tmp_path / "ckpt", **make_state(0))
    assert (tmp_path / "ckpt").read_text() == "precious"


def test_object_array_is_refused_naming_the_parameter(tmp_path: Path) -> None:
    state = make_state(0)
    state["params"]["dense_0/kernel"] = np.array([{"a": 1}, None], dtype=object)
    with pytest.raises(CheckpointError, match="'dense_0/kernel' has dtype object") as caught:
        save_checkpoint(tmp_path / "ckpt", **state)
    assert str(tmp_path / "ckpt" / "params.npz") in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("field", "name", "value", "message"),
    [
        ("optimizer_state", "adam/m", np.array(["text"]), "dtype <U4"),
        ("params", "", np.zeros(2), "non-empty string"),
        ("params", "dense_0/kernel.npy", np.zeros(2), "must not end in '.npy'"),
    ],
)
def test_unstorable_arrays_and_names_are_refused(
    tmp_path: Path, field: str, name: str, value: np.ndarray, message: str
) -> None:
    state = make_state(0)
    state[field][name] = value
    with pytest.raises(CheckpointError, match=message):
        save_checkpoint(tmp_path / "ckpt", **state)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("step", -1, "non-negative"),
        ("step", 1.5, "must be an integer"),
        ("step", True, "must be an integer"),
        ("config", {"lr": float("nan")}, "not JSON-serialisable"),
        ("config", {"shape": np.int64(3)}, "not JSON-serialisable"),
        ("rng_state", {"workers": {0: "state"}}, "non-string key 0"),
        ("rng_state", [1, 2], "must be a dict"),
    ],
)
def test_invalid_step_and_metadata_are_refused(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    state = {**make_state(0), field: value}
    with pytest.raises(CheckpointError, match=message) as caught:
        save_checkpoint(tmp_path / "ckpt", **state)
    assert str(tmp_path / "ckpt" / "manifest.json") in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_numpy_integer_step_is_stored_as_int(tmp_path: Path) -> None:
    state = {**make_state(0), "step": np.int64(42)}
    step = load_checkpoint(save_checkpoint(tmp_path / "ckpt", **state)).step
    assert step == 42 and type(step) is int
