"""Write a checkpoint into a temporary sibling directory, then swap it into place."""

from __future__ import annotations

import contextlib
import errno
import json
import operator
import os
import secrets
import shutil
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from workbench.checkpoint.checksums import FileDigest, sha256_file
from workbench.checkpoint.layout import (
    ARRAY_MAPS,
    CHECKPOINT_FILES,
    MANIFEST_FILE,
    NPY_SUFFIX,
    OPTIMIZER_FILE,
    PARAMS_FILE,
    STORABLE_DTYPE_KINDS,
    CheckpointError,
    aside_prefix,
    build_manifest,
    encode_manifest,
    temporary_prefix,
)

# A fixed timestamp on every archive entry makes the same state produce the same bytes, hence
# the same checksums, whenever it is saved.
_ZIP_DATE_TIME = (1980, 1, 1, 0, 0, 0)


def save_checkpoint(
    directory: str | os.PathLike[str],
    *,
    params: Mapping[str, np.ndarray],
    optimizer_state: Mapping[str, np.ndarray],
    step: int,
    rng_state: dict,
    config: dict,
) -> Path:
    """Save a training state to ``directory`` atomically.

    Everything is written and fsync'd in a fresh sibling directory named
    ``.<name>.tmp-<random>``; only then is an existing checkpoint at ``directory`` renamed
    aside, the new one renamed in, and the old one removed. A crash at any moment leaves
    ``directory`` holding the old complete checkpoint, the new complete one, or nothing.

    Parameters
    ----------
    directory : str or path-like
        Where the checkpoint goes. Missing parents are created. If it exists it must be a
        checkpoint (only ``params.npz``, ``optimizer.npz`` and ``manifest.json``) or empty.
    params : mapping of str to numpy.ndarray
        Parameters by layer path, e.g. ``"dense_0/kernel"``. Saved bit-exactly, dtype kept.
    optimizer_state : mapping of str to numpy.ndarray
        Optimizer state by name, e.g. ``"dense_0/kernel/momentum"``; may be empty.
    step : int
        Global steps completed, non-negative.
    rng_state, config : dict
        JSON-serialisable, string keys only; tuples come back as lists.

    Returns
    -------
    pathlib.Path
        The absolute path of the saved checkpoint.

    Raises
    ------
    CheckpointError
        If an array has a dtype that cannot be stored without pickle (object, string,
        structured), a name is empty, contains NUL or ends in ``.npy``, ``step`` is not a
        non-negative integer, ``rng_state`` or ``config`` is not strict JSON, or
        ``directory`` exists and is not a checkpoint. Nothing is written in these cases.

    Examples
    --------
    >>> import tempfile
    >>> import numpy as np
    >>> from workbench.checkpoint import load_checkpoint, save_checkpoint
    >>> root = tempfile.mkdtemp()
    >>> path = save_checkpoint(
    ...     f"{root}/run/step-10",
    ...     params={"dense_0/kernel": np.ones((2, 3), np.float32)},
    ...     optimizer_state={"adam/step": np.array(10)},
    ...     step=10,
    ...     rng_state={"seed": 0},
    ...     config={"lr": 0.1},
    ... )
    >>> sorted(p.name for p in path.iterdir())
    ['manifest.json', 'optimizer.npz', 'params.npz']
    >>> load_checkpoint(path).params["dense_0/kernel"].dtype
    dtype('float32')
    """
    target = Path(directory).absolute()
    arrays = {
        PARAMS_FILE: _storable_arrays(target / PARAMS_FILE, params, "parameter"),
        OPTIMIZER_FILE: _storable_arrays(target / OPTIMIZER_FILE, optimizer_state, "array"),
    }
    manifest_path = target / MANIFEST_FILE
    step = _checked_step(manifest_path, step)
    _check_json(manifest_path, "rng_state", rng_state)
    _check_json(manifest_path, "config", config)
    _check_replaceable(target)

    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = _new_sibling_directory(target, temporary_prefix(target.name))
    try:
        digests = {name: _write_npz(temporary / name, arrays[name]) for name in ARRAY_MAPS}
        manifest = build_manifest(
            step=step,
            rng_state=rng_state,
            config=config,
            files=digests,
            params=arrays[PARAMS_FILE],
            optimizer_state=arrays[OPTIMIZER_FILE],
        )
        _write_durably(temporary / MANIFEST_FILE, encode_manifest(manifest))
        # The renames below are only safe once the directory entries themselves are on disk.
        _fsync_directory(temporary)
        _swap_into_place(temporary, target)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return target


def _storable_arrays(
    path: Path, arrays: Mapping[str, np.ndarray], kind: str
) -> dict[str, np.ndarray]:
    """Check names and dtypes before anything touches the disk."""
    if not isinstance(arrays, Mapping):
        raise CheckpointError(f"{path}: expected a mapping of name to array, found {arrays!r}")
    checked = {}
    for name, value in arrays.items():
        if not isinstance(name, str) or not name or "\x00" in name:
            raise CheckpointError(f"{path}: {kind} name {name!r} must be a non-empty string")
        if name.endswith(NPY_SUFFIX):
            # numpy.load strips one ".npy" from entry names, so "x.npy" would collide with "x".
            raise CheckpointError(f"{path}: {kind} name {name!r} must not end in {NPY_SUFFIX!r}")
        array = np.asarray(value)
        if array.dtype.kind not in STORABLE_DTYPE_KINDS:
            raise CheckpointError(
                f"{path}: {kind} {name!r} has dtype {array.dtype} and cannot be stored without "
                "pickle; checkpoints hold bool, integer, float and complex arrays only"
            )
        checked[name] = array
    return checked


def _checked_step(path: Path, step: Any) -> int:
    try:
        if isinstance(step, bool):
            raise TypeError
        value = operator.index(step)
    except TypeError:
        raise CheckpointError(f"{path}: step must be an integer, found {step!r}") from None
    if value < 0:
        raise CheckpointError(f"{path}: step must be non-negative, found {value}")
    return value


def _check_json(path: Path, key: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: {key} must be a dict, found {type(value).__name__}")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}: {key} is not JSON-serialisable ({exc})") from None
    # JSON would silently turn {0: ...} into {"0": ...}, and lookups after resuming would fail.
    bad_key = _non_string_key(value)
    if bad_key is not None:
        raise CheckpointError(f"{path}: {key} has non-string key {bad_key}")


def _non_string_key(value: Any, where: str = "") -> str | None:
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{key!r} at {where or 'top level'}"
            found = _non_string_key(item, f"{where}[{key!r}]")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = _non_string_key(item, f"{where}[{index}]")
            if found:
                return found
    return None


def _check_replaceable(target: Path) -> None:
    """Refuse to replace anything but a checkpoint or an empty directory."""
    if target.is_symlink():
        raise CheckpointError(f"{target}: is a symbolic link; refusing to replace it")
    if not target.exists():
        return
    if not target.is_dir():
        raise CheckpointError(f"{target}: exists and is not a directory; refusing to replace it")
    entries = {entry.name: entry for entry in os.scandir(target)}
    if not entries:
        return
    foreign = sorted(
        name
        for name, entry in entries.items()
        if name not in CHECKPOINT_FILES or entry.is_dir(follow_symlinks=False)
    )
    if foreign or MANIFEST_FILE not in entries:
        shown = foreign or sorted(entries)
        raise CheckpointError(
            f"{target}: exists and is not a checkpoint (it holds {shown[:5]}); refusing to "
            "replace it. Choose another directory or empty it first."
        )


def _new_sibling_directory(target: Path, prefix: str) -> Path:
    # os.mkdir (unlike tempfile.mkdtemp's 0o700) honours the umask, so the checkpoint ends up
    # with the same permissions as any other directory the user creates.
    while True:
        candidate = target.parent / f"{prefix}{secrets.token_hex(4)}"
        try:
            os.mkdir(candidate)
        except FileExistsError:
            continue
        return candidate


def _write_npz(path: Path, arrays: dict[str, np.ndarray]) -> FileDigest:
    """Write the same archive ``numpy.savez`` would, but with fixed timestamps."""
    with open(path, "xb") as handle:
        with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, array in arrays.items():
                info = zipfile.ZipInfo(name + NPY_SUFFIX, date_time=_ZIP_DATE_TIME)
                info.external_attr = 0o644 << 16
                with zf.open(info, "w", force_zip64=True) as entry:
                    np.lib.format.write_array(entry, array, allow_pickle=False)
        handle.flush()
        os.fsync(handle.fileno())
    # Hash what is on disk rather than what was meant to be written.
    return sha256_file(path)


def _write_durably(path: Path, data: bytes) -> None:
    with open(path, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_directory(path: Path) -> None:
    if os.name != "posix":
        return
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    except OSError as exc:
        # Some file systems cannot fsync a directory; the renames are still atomic there.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(descriptor)


def _swap_into_place(temporary: Path, target: Path) -> None:
    """Rename ``temporary`` to ``target``, moving any existing ``target`` aside first."""
    aside = None
    if target.exists():
        aside = _unused_sibling_name(target, aside_prefix(target.name))
        os.replace(target, aside)
    try:
        os.replace(temporary, target)
    except BaseException:
        if aside is not None:
            # Put the old checkpoint back; if even that fails it survives at ``aside`` and
            # load_checkpoint's error points there.
            with contextlib.suppress(OSError):
                os.replace(aside, target)
        raise
    _fsync_directory(target.parent)
    if aside is not None:
        try:
            shutil.rmtree(aside)
        except OSError as exc:
            # The new checkpoint is committed; a stale copy of the old one is only clutter.
            warnings.warn(
                f"{aside}: could not remove the previous checkpoint ({exc})",
                RuntimeWarning,
                stacklevel=3,
            )


def _unused_sibling_name(target: Path, prefix: str) -> Path:
    while True:
        candidate = target.parent / f"{prefix}{secrets.token_hex(4)}"
        if not os.path.lexists(candidate):
            return candidate
