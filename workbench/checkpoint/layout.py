"""File names, manifest schema and format version of an on-disk checkpoint.

A checkpoint is a directory holding exactly these files::

    params.npz      one ``<name>.npy`` entry per parameter, ``<name>`` its layer path
    optimizer.npz   the same for optimizer state
    manifest.json   everything else, and what the two archives are checked against

``manifest.json``, format version 1::

    {
      "format": "dtrain-checkpoint",
      "format_version": 1,
      "step": 120,
      "rng_state": {...},
      "config": {...},
      "files": {
        "params.npz": {"sha256": "<64 hex digits>", "bytes": 2310},
        "optimizer.npz": {"sha256": "<64 hex digits>", "bytes": 1854}
      },
      "params": {"dense_0/kernel": {"shape": [4, 3], "dtype": "float32"}, ...},
      "optimizer_state": {"dense_0/kernel/momentum": {"shape": [4, 3], "dtype": "float32"}, ...},
      "manifest_sha256": "<64 hex digits>"
    }

``manifest_sha256`` is the SHA-256 of the canonical JSON (sorted keys, no whitespace) of every
other key, so an edit to the manifest itself is caught, not only edits to the archives. The
``params`` and ``optimizer_state`` maps keep the order the arrays were saved in.

The digests are plain SHA-256, not keyed: they detect corruption and edits by tools that do
not know the format, not a writer who recomputes them (docs/security/files.md).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from workbench.checkpoint.checksums import FileDigest, sha256_json

FORMAT_NAME = "dtrain-checkpoint"
FORMAT_VERSION = 1

PARAMS_FILE = "params.npz"
OPTIMIZER_FILE = "optimizer.npz"
MANIFEST_FILE = "manifest.json"
CHECKPOINT_FILES = frozenset({PARAMS_FILE, OPTIMIZER_FILE, MANIFEST_FILE})

# Which manifest map describes the arrays of which archive.
ARRAY_MAPS = {PARAMS_FILE: "params", OPTIMIZER_FILE: "optimizer_state"}

NPY_SUFFIX = ".npy"
MANIFEST_CHECKSUM_KEY = "manifest_sha256"
REQUIRED_KEYS = ("step", "rng_state", "config", "files", "params", "optimizer_state")

# Only kinds whose dtype name says everything about the bytes (bool, ints, floats, complex):
# the manifest records ``dtype.name``, which would be ambiguous for structured or string dtypes.
STORABLE_DTYPE_KINDS = frozenset("biufc")

_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")

# A manifest lists one entry per array and a run's config: megabytes at most. Bounding its size
# keeps a hostile one from exhausting memory (docs/security/files.md, "Checkpoints").
MAX_MANIFEST_BYTES = 16 << 20


class CheckpointError(ValueError):
    """A checkpoint could not be saved or loaded; the message names the file and the problem."""


@dataclass(frozen=True)
class Checkpoint:
    """Everything :func:`~workbench.checkpoint.load_checkpoint` read back, verified."""

    params: dict[str, np.ndarray]
    optimizer_state: dict[str, np.ndarray]
    step: int
    rng_state: dict
    config: dict
    manifest: dict


def temporary_prefix(name: str) -> str:
    """Name prefix of the sibling directory a save of ``name`` is written into."""
    return f".{name}.tmp-"


def aside_prefix(name: str) -> str:
    """Name prefix the previous checkpoint ``name`` is renamed to while a new one moves in."""
    return f".{name}.old-"


def is_temporary_name(name: str) -> bool:
    """Whether ``name`` is a save's temporary directory, which must never load."""
    return name.startswith(".") and ".tmp-" in name


def array_entry(array: np.ndarray) -> dict[str, Any]:
    """The manifest's description of one array."""
    return {"shape": list(array.shape), "dtype": array.dtype.name}


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``manifest`` without its own checksum key."""
    return sha256_json({k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM_KEY})


def build_manifest(
    *,
    step: int,
    rng_state: dict,
    config: dict,
    files: dict[str, FileDigest],
    params: dict[str, np.ndarray],
    optimizer_state: dict[str, np.ndarray],
) -> dict[str, Any]:
    """Assemble a sealed manifest (with ``manifest_sha256``) for arrays already written."""
    manifest: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "step": step,
        "rng_state": rng_state,
        "config": config,
        "files": {name: {"sha256": d.sha256, "bytes": d.bytes} for name, d in files.items()},
        "params": {name: array_entry(array) for name, array in params.items()},
        "optimizer_state": {name: array_entry(array) for name, array in optimizer_state.items()},
    }
    manifest[MANIFEST_CHECKSUM_KEY] = manifest_checksum(manifest)
    return manifest


def encode_manifest(manifest: dict[str, Any]) -> bytes:
    """The bytes written to ``manifest.json``: indented for people, ASCII, strict JSON."""
    return (json.dumps(manifest, indent=2, allow_nan=False) + "\n").encode("ascii")


def parse_manifest(path: Path, raw: bytes) -> dict[str, Any]:
    """Decode and validate ``manifest.json`` read from ``path``.

    Checks, in order: JSON syntax, format name, format version, the manifest's own checksum,
    then the presence and types of every key the reader uses. Raises :class:`CheckpointError`
    naming ``path`` on the first problem.
    """

    def refuse(what: str) -> CheckpointError:
        return CheckpointError(f"{path}: {what}")

    if len(raw) > MAX_MANIFEST_BYTES:
        raise refuse(f"{len(raw)} bytes, more than a manifest takes ({MAX_MANIFEST_BYTES} at most)")
    try:
        manifest = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:
        # The parser counts its nesting against the interpreter's recursion limit.
        raise refuse("malformed manifest: its arrays and objects nest too deep") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise refuse(f"malformed JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise refuse(f"malformed manifest: expected a JSON object, found {type(manifest).__name__}")

    if manifest.get("format") != FORMAT_NAME:
        raise refuse(f"unknown format {manifest.get('format')!r} (expected {FORMAT_NAME!r})")
    version = manifest.get("format_version")
    if not _is_int(version) or version < 1:
        raise refuse(f"unknown format_version {version!r} (expected {FORMAT_VERSION})")
    if version > FORMAT_VERSION:
        raise refuse(
            f"format_version {version} is newer than this reader supports ({FORMAT_VERSION}); "
            "upgrade workbench to load it"
        )

    expected = manifest.get(MANIFEST_CHECKSUM_KEY)
    if not isinstance(expected, str):
        raise refuse(f"missing key {MANIFEST_CHECKSUM_KEY!r}")
    try:
        found = manifest_checksum(manifest)
    except (TypeError, ValueError, RecursionError) as exc:
        raise refuse(f"malformed manifest ({exc})") from None
    if found != expected:
        raise refuse(
            f"checksum mismatch (expected {expected}, found {found}); "
            "the manifest was changed or corrupted after it was written"
        )

    missing = [key for key in REQUIRED_KEYS if key not in manifest]
    if missing:
        raise refuse(f"missing key(s) {missing}")
    step = manifest["step"]
    if not _is_int(step) or step < 0:
        raise refuse(f"'step' must be a non-negative integer, found {step!r}")
    for key in ("rng_state", "config"):
        if not isinstance(manifest[key], dict):
            raise refuse(f"{key!r} must be a JSON object")
    _check_files_map(manifest["files"], refuse)
    for key in ARRAY_MAPS.values():
        _check_array_map(key, manifest[key], refuse)
    return manifest


def declared_bytes(manifest: dict[str, Any], key: str) -> int:
    """The bytes the arrays of the manifest map ``key`` take, as their shapes and dtypes say
    (an entry whose dtype is not a number type counts nothing: reading its array refuses it)."""
    total = 0
    for entry in manifest[key].values():
        try:
            dtype = np.dtype(entry["dtype"])
        except (TypeError, ValueError, SyntaxError):
            continue
        if dtype.kind in STORABLE_DTYPE_KINDS:
            total += math.prod(entry["shape"]) * dtype.itemsize
    return total


def _refuse_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; the writer never produces them.
    raise ValueError(f"non-standard constant {name}")


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_files_map(files: Any, refuse: Callable[[str], CheckpointError]) -> None:
    if not isinstance(files, dict) or set(files) != set(ARRAY_MAPS):
        found = sorted(files) if isinstance(files, dict) else files
        raise refuse(f"'files' must list exactly {sorted(ARRAY_MAPS)}, found {found!r}")
    for name, entry in files.items():
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and _HEX_SHA256.fullmatch(entry["sha256"])
            and _is_int(entry.get("bytes"))
            and entry["bytes"] >= 0
        ):
            raise refuse(f"'files' entry for {name!r} needs a hex 'sha256' and integer 'bytes'")


def _check_array_map(key: str, arrays: Any, refuse: Callable[[str], CheckpointError]) -> None:
    if not isinstance(arrays, dict):
        raise refuse(f"{key!r} must be a JSON object")
    for name, entry in arrays.items():
        shape = entry.get("shape") if isinstance(entry, dict) else None
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        if not (
            isinstance(shape, list)
            and all(_is_int(n) and n >= 0 for n in shape)
            and isinstance(dtype, str)
        ):
            raise refuse(f"{key!r} entry for {name!r} needs a 'shape' list and a 'dtype' name")
