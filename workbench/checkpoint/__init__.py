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
    Loading never unpickles. Every file must be a regular file (a FIFO is refused, never
    waited on). The manifest is checked first (size, format, version, own checksum, schema),
    then the memory its arrays take, then each archive's size and SHA-256 before it is parsed,
    then its arrays' names, and each array's header (shape, number dtype, bytes) before it is
    allocated, against the manifest. :func:`check_fits_model` then checks the arrays against
    the model and optimizer of the run that resumes them, before it starts. Every refusal is a
    :class:`CheckpointError` whose message starts with the full path of the offending file.

    The checksums are not keyed: they catch corruption and careless edits, not a writer who
    recomputes them (docs/security/files.md, "Checksums catch corruption, not a writer").
"""

from workbench.checkpoint.layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    Checkpoint,
    CheckpointError,
)
from workbench.checkpoint.load import load_checkpoint
from workbench.checkpoint.model_fit import check_fits_model
from workbench.checkpoint.save import save_checkpoint

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "Checkpoint",
    "CheckpointError",
    "check_fits_model",
    "load_checkpoint",
    "save_checkpoint",
]
