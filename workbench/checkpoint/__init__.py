"""Checkpoints: a training state saved atomically and loaded only after verification.

What flows in and out
    :func:`save_checkpoint` takes parameters and optimizer state (name -> numpy array, names
    are layer paths such as ``"dense_0/kernel"``), the step, the RNG state and the run config;
    :func:`load_checkpoint` gives the same back as a :class:`Checkpoint`.

Layout
    A checkpoint is a directory with ``params.npz``, ``optimizer.npz`` (both plain
    ``numpy.load(..., allow_pickle=False)``-able archives, one ``.npy`` per array) and
    ``manifest.json`` (format ``"dtrain-checkpoint"`` version 1: step, RNG state, config,
    SHA-256 and size of each archive, shape and dtype of each array, and a checksum of the
    manifest itself). :mod:`workbench.checkpoint.layout` documents the schema.

Atomicity
    A save is written and fsync'd in a sibling ``.<name>.tmp-*`` directory, then swapped in by
    renames (old checkpoint aside, new one in, old one removed). A crash leaves the old
    complete checkpoint, the new complete one, or none; a temporary directory never loads.
    A directory holding anything but a checkpoint is never replaced.

Verification
    Loading never unpickles. The manifest is checked first (format, version, own checksum,
    schema), then each archive's size and SHA-256 before it is parsed, then its arrays'
    names, shapes and dtypes against the manifest. Every refusal is a :class:`CheckpointError`
    whose message starts with the full path of the offending file.
"""

from workbench.checkpoint.layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    Checkpoint,
    CheckpointError,
)
from workbench.checkpoint.load import load_checkpoint
from workbench.checkpoint.save import save_checkpoint

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Checkpoint",
    "CheckpointError",
    "load_checkpoint",
    "save_checkpoint",
]
