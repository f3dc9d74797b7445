"""Every change to a saved checkpoint is refused, with a message naming the changed file."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pytest

from workbench.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from workbench.checkpoint.layout import manifest_checksum

FILES = ["params.npz", "optimizer.npz", "manifest.json"]


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return save_checkpoint(
        tmp_path / "ckpt",
        params={
            "dense_0/kernel": np.arange(12, dtype=np.float32).reshape(4, 3),
            "dense_0/bias": np.array([0.5, -1.5, 2.0], dtype=np.float64),
        },
        optimizer_state={
            "dense_0/kernel/momentum": np.full((4, 3), 0.25, np.float32),
            "adam/step": np.int64(9),
        },
        step=9,
        rng_state={"seed": 1234, "counter": [3, 1]},
        config={"model": "mlp", "lr": 0.125, "layers": [4, 3], "shuffle": True},
    )


def refused(path: Path, match: str) -> AbstractContextManager:
    """Expect a CheckpointError whose message starts with the file's full path."""
    return pytest.raises(CheckpointError, match=f"^{re.escape(str(path))}: .*{match}")


def flip_byte(path: Path, offset: int, mask: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def reseal_manifest(checkpoint: Path, edit: Callable[[dict], None]) -> None:
    """Edit the manifest and recompute every checksum in it, as a careless tool or a forger
    would; only the consistency checks between manifest and archives can then notice."""
    path = checkpoint / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    for name in manifest["files"]:
        data = (checkpoint / name).read_bytes()
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    manifest["manifest_sha256"] = manifest_checksum(manifest)
    path.write_text(json.dumps(manifest, indent=2))


def rewrite_npz(path: Path, edit: Callable[[dict], None]) -> None:
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    edit(arrays)
    np.savez(path, **arrays)


def test_untouched_checkpoint_loads(checkpoint: Path) -> None:
    assert load_checkpoint(checkpoint).step == 9


@pytest.mark.parametrize("name", ["params.npz", "optimizer.npz"])
@pytest.mark.parametrize("where", [0, 0.5, -1])
def test_one_flipped_byte_in_an_archive_is_refused(
    checkpoint: Path, name: str, where: float
) -> None:
    path = checkpoint / name
    flip_byte(path, int(where * path.stat().st_size) if where != -1 else -1)
    with refused(path, "checksum mismatch .*changed or corrupted after it was written"):
        load_checkpoint(checkpoint)


@pytest.mark.parametrize("mask", [0x01, 0x80])
def test_every_single_byte_flip_in_the_manifest_is_refused(checkpoint: Path, mask: int) -> None:
    path = checkpoint / "manifest.json"
    original = path.read_bytes()
    for offset in range(len(original)):
        data = bytearray(original)
        data[offset] ^= mask
        path.write_bytes(bytes(data))
        with refused(path, ""):
            load_checkpoint(checkpoint)


def test_an_edited_manifest_value_is_caught_by_its_own_checksum(checkpoint: Path) -> None:
    path = checkpoint / "manifest.json"
    path.write_text(path.read_text().replace('"lr": 0.125', '"lr": 0.5'))
    with refused(path, "checksum mismatch"):
        load_checkpoint(checkpoint)


@pytest.mark.parametrize("name", FILES)
def test_a_truncated_file_is_refused(checkpoint: Path, name: str) -> None:
    path = checkpoint / name
    path.write_bytes(path.read_bytes()[:-10])
    with refused(path, "size mismatch|malformed JSON"):
        load_checkpoint(checkpoint)


@pytest.mark.parametrize("name", FILES)
def test_a_deleted_file_is_refused(checkpoint: Path, name: str) -> None:
    (checkpoint / name).unlink()
    with refused(checkpoint / name, "missing"):
        load_checkpoint(checkpoint)


@pytest.mark.parametrize("name", ["params.npz", "optimizer.npz"])
def test_an_array_added_to_an_archive_is_refused(checkpoint: Path, name: str) -> None:
    rewrite_npz(checkpoint / name, lambda arrays: arrays.update({"dense_9/kernel": np.ones(2)}))
    reseal_manifest(checkpoint, lambda manifest: None)
    with refused(checkpoint / name, r"holds arrays not listed in .*manifest.json: \['dense_9/"):
        load_checkpoint(checkpoint)


def test_an_array_removed_from_an_archive_is_refused(checkpoint: Path) -> None:
    rewrite_npz(checkpoint / "params.npz", lambda arrays: arrays.pop("dense_0/bias"))
    reseal_manifest(checkpoint, lambda manifest: None)
    with refused(checkpoint / "params.npz", r"lacks arrays .*\['dense_0/bias'\]"):
        load_checkpoint(checkpoint)


def test_an_edited_manifest_shape_is_refused(checkpoint: Path) -> None:
    def edit(manifest: dict) -> None:
        manifest["params"]["dense_0/kernel"]["shape"] = [3, 4]

    # Edited by hand: the manifest's own checksum no longer matches.
    path = checkpoint / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest, indent=2))
    with refused(path, "checksum mismatch"):
        load_checkpoint(checkpoint)

    # Resealed: the archive disagrees with what the manifest promises.
    reseal_manifest(checkpoint, edit)
    with refused(checkpoint / "params.npz", r"'dense_0/kernel' has shape \[4, 3\] .*\[3, 4\]"):
        load_checkpoint(checkpoint)


def test_an_edited_manifest_dtype_is_refused(checkpoint: Path) -> None:
    def edit(manifest: dict) -> None:
        manifest["optimizer_state"]["adam/step"]["dtype"] = "int32"

    reseal_manifest(checkpoint, edit)
    with refused(checkpoint / "optimizer.npz", "has dtype int64 .* says int32"):
        load_checkpoint(checkpoint)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(format_version=2), "newer than this reader supports"),
        (lambda m: m.update(format="other-checkpoint"), "unknown format"),
        (lambda m: m.pop("step"), r"missing key\(s\) \['step'\]"),
        (lambda m: m.update(step=-3), "non-negative integer"),
        (lambda m: m["files"].pop("optimizer.npz"), "'files' must list exactly"),
        (lambda m: m["params"].update({"x": {"shape": "4"}}), "'params' entry for 'x'"),
    ],
)
def test_invalid_manifest_contents_are_refused(checkpoint: Path, edit, message: str) -> None:
    reseal_manifest(checkpoint, edit)
    with refused(checkpoint / "manifest.json", message):
        load_checkpoint(checkpoint)


def test_malformed_manifest_json_is_refused(checkpoint: Path) -> None:
    (checkpoint / "manifest.json").write_text('{"format": "dtrain-checkpoint",')
    with refused(checkpoint / "manifest.json", "malformed JSON"):
        load_checkpoint(checkpoint)


def test_a_pickled_object_array_is_never_unpickled(checkpoint: Path, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    buffer = io.BytesIO()
    np.savez(buffer, **{"dense_0/kernel": np.array([Payload()], dtype=object)})
    (checkpoint / "params.npz").write_bytes(buffer.getvalue())

    def edit(manifest: dict) -> None:
        manifest["params"] = {"dense_0/kernel": {"shape": [1], "dtype": "object"}}

    reseal_manifest(checkpoint, edit)
    with refused(checkpoint / "params.npz", "allow_pickle"):
        load_checkpoint(checkpoint)
    assert not marker.exists()


def test_a_leftover_temporary_directory_never_loads(checkpoint: Path) -> None:
    leftover = checkpoint.parent / ".ckpt.tmp-0123abcd"
    shutil.copytree(checkpoint, leftover)
    with refused(leftover, "temporary directory of a save that did not finish"):
        load_checkpoint(leftover)


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with refused(tmp_path / "nothing", "no checkpoint here"):
        load_checkpoint(tmp_path / "nothing")


def test_a_directory_without_manifest_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with refused(tmp_path / "empty" / "manifest.json", "missing"):
        load_checkpoint(tmp_path / "empty")
