"""Read a checkpoint back, verifying every byte against its manifest before parsing it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from workbench.checkpoint.checksums import sha256_stream
from workbench.checkpoint.layout import (
    ARRAY_MAPS,
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    OPTIMIZER_FILE,
    PARAMS_FILE,
    Checkpoint,
    CheckpointError,
    aside_prefix,
    declared_bytes,
    is_temporary_name,
    parse_manifest,
)
from workbench.safe_io.bounded_npz import npz_entries, open_npz, read_npz_arrays
from workbench.safe_io.bounded_read import (
    FileMissing,
    FileRefused,
    available_memory,
    check_memory,
    file_size,
    format_bytes,
    open_regular,
)


def load_checkpoint(directory: str | os.PathLike[str]) -> Checkpoint:
    """Load and verify the checkpoint saved in ``directory``.

    The manifest is validated first (format, version, its own checksum, schema); then each
    archive's size and SHA-256 are checked against the manifest before it is parsed, and the
    arrays it holds must match the manifest's names, shapes and dtypes exactly. Nothing is ever
    unpickled.

    Parameters
    ----------
    directory : str or path-like
        A directory written by :func:`~workbench.checkpoint.save_checkpoint`.

    Returns
    -------
    Checkpoint
        Plain, writable numpy arrays in the order they were saved, plus step, RNG state,
        config and the parsed manifest.

    Raises
    ------
    CheckpointError
        Naming the offending file (full path) and what is wrong with it: missing, truncated,
        checksum mismatch, malformed or newer manifest, arrays added, missing or reshaped.

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> from workbench.checkpoint import load_checkpoint, save_checkpoint
    >>> path = save_checkpoint(
    ...     f"{tempfile.mkdtemp()}/ckpt",
    ...     params={"dense_0/bias": np.arange(3.0)},
    ...     optimizer_state={},
    ...     step=7,
    ...     rng_state={},
    ...     config={"model": "mlp"},
    ... )
    >>> checkpoint = load_checkpoint(path)
    >>> checkpoint.step, checkpoint.params["dense_0/bias"].tolist()
    (7, [0.0, 1.0, 2.0])
    """
    source = Path(directory).absolute()
    _check_directory(source)
    manifest_path = source / MANIFEST_FILE
    manifest = parse_manifest(manifest_path, _read_manifest(manifest_path, source))
    declared = sum(declared_bytes(manifest, key) for key in ARRAY_MAPS.values())
    try:
        check_memory(manifest_path, declared, "the arrays it lists")
        arrays = {
            name: _read_verified_archive(source / name, manifest, manifest_path)
            for name in ARRAY_MAPS
        }
    except FileRefused as error:
        raise CheckpointError(str(error)) from None
    except OSError as error:
        raise CheckpointError(f"{source}: cannot be read ({error})") from None
    except MemoryError:
        # Every size is checked before it is allocated; this is what is left, still named.
        raise CheckpointError(
            f"{source}: does not fit in memory ({format_bytes(declared)} of arrays, "
            f"{format_bytes(available_memory())} available now)"
        ) from None
    return Checkpoint(
        params=arrays[PARAMS_FILE],
        optimizer_state=arrays[OPTIMIZER_FILE],
        step=manifest["step"],
        rng_state=manifest["rng_state"],
        config=manifest["config"],
        manifest=manifest,
    )


def _check_directory(source: Path) -> None:
    if is_temporary_name(source.name):
        raise CheckpointError(
            f"{source}: is the temporary directory of a save that did not finish, not a checkpoint"
        )
    if source.is_dir():
        return
    if source.exists():
        raise CheckpointError(f"{source}: is not a directory, so not a checkpoint")
    # A save interrupted between its two renames leaves the previous checkpoint set aside.
    set_aside = sorted(source.parent.glob(f"{aside_prefix(source.name)}*"))
    hint = ""
    if set_aside:
        hint = (
            f"; an interrupted save left the previous checkpoint at {set_aside[-1]}, "
            f"rename it to {source.name} to recover it"
        )
    raise CheckpointError(f"{source}: no checkpoint here (directory does not exist){hint}")


def _read_manifest(manifest_path: Path, source: Path) -> bytes:
    """The bytes of ``manifest.json``: a regular file no larger than a manifest can be."""
    try:
        with open_regular(manifest_path) as handle:
            size = file_size(handle)
            if size > MAX_MANIFEST_BYTES:
                raise CheckpointError(
                    f"{manifest_path}: {size} bytes, more than a manifest takes "
                    f"({MAX_MANIFEST_BYTES} at most)"
                )
            return handle.read(MAX_MANIFEST_BYTES + 1)
    except FileMissing:
        raise CheckpointError(f"{manifest_path}: missing; {source} is not a checkpoint") from None
    except FileRefused as error:
        raise CheckpointError(str(error)) from None
    except OSError as exc:
        raise CheckpointError(f"{manifest_path}: cannot be read ({exc})") from None


def _read_verified_archive(
    path: Path, manifest: dict[str, Any], manifest_path: Path
) -> dict[str, np.ndarray]:
    expected_file = manifest["files"][path.name]
    expected_arrays = manifest[ARRAY_MAPS[path.name]]
    # Hash and parse through one handle so the bytes parsed are the bytes verified, even if
    # the name is re-pointed in between.
    with _open_listed_file(path, manifest_path) as handle:
        size = file_size(handle)
        if size != expected_file["bytes"]:
            raise CheckpointError(
                f"{path}: size mismatch (expected {expected_file['bytes']} bytes, found {size}); "
                "the file was truncated or changed after it was written"
            )
        # The arrays are stored uncompressed: an archive larger than memory allows cannot
        # load, and hashing it first would only take time.
        check_memory(path, size, "the archive")
        found = sha256_stream(handle).sha256
        if found != expected_file["sha256"]:
            raise CheckpointError(
                f"{path}: checksum mismatch (expected {expected_file['sha256']}, found {found}); "
                "the file was changed or corrupted after it was written"
            )
        handle.seek(0)
        with open_npz(str(path), handle) as archive:
            entries = npz_entries(str(path), archive)
            _check_names(path, set(entries), set(expected_arrays), manifest_path)
            arrays = read_npz_arrays(str(path), archive, entries)
    _check_against_manifest(path, arrays, expected_arrays, manifest_path)
    return {name: arrays[name] for name in expected_arrays}


def _open_listed_file(path: Path, manifest_path: Path) -> BinaryIO:
    try:
        return open_regular(path)
    except FileMissing:
        raise CheckpointError(f"{path}: missing (listed in {manifest_path})") from None


def _check_names(path: Path, found: set[str], expected: set[str], manifest_path: Path) -> None:
    """Before any array is read: the archive holds exactly the arrays the manifest lists."""
    extra = sorted(found - expected)
    if extra:
        raise CheckpointError(f"{path}: holds arrays not listed in {manifest_path}: {extra}")
    missing = sorted(expected - found)
    if missing:
        raise CheckpointError(f"{path}: lacks arrays listed in {manifest_path}: {missing}")


def _check_against_manifest(
    path: Path,
    arrays: dict[str, np.ndarray],
    expected: dict[str, dict[str, Any]],
    manifest_path: Path,
) -> None:
    for name, entry in expected.items():
        array = arrays[name]
        if list(array.shape) != entry["shape"]:
            raise CheckpointError(
                f"{path}: array {name!r} has shape {list(array.shape)} but {manifest_path} "
                f"says {entry['shape']}"
            )
        if array.dtype.name != entry["dtype"]:
            raise CheckpointError(
                f"{path}: array {name!r} has dtype {array.dtype.name} but {manifest_path} "
                f"says {entry['dtype']}"
            )
