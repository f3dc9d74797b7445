"""Whether a loaded checkpoint fits the model and optimizer a run is about to train, checked
before anything starts (a misfit would otherwise fail only mid-training, on a device).

The arrays a run needs are described as plain data (name -> shape and dtype) by the caller,
so this package needs nothing from the layers that build models and optimizers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from workbench.checkpoint.layout import OPTIMIZER_FILE, PARAMS_FILE, Checkpoint, CheckpointError

# name -> (shape, dtype name): an array as the model or optimizer will hold it.
ArraySpecs = Mapping[str, tuple[tuple[int, ...], str]]
_SHOWN = 4  # names listed in a message before "..."


def check_fits_model(
    directory: str | os.PathLike[str],
    checkpoint: Checkpoint,
    parameters: ArraySpecs,
    optimizer_slots: ArraySpecs,
    optimizer: str,
) -> None:
    """Refuse the checkpoint loaded from ``directory`` unless its parameters are exactly the
    model's (names, shapes, dtypes) and its optimizer state exactly the slots ``optimizer``
    keeps for them.

    A checkpoint with no optimizer state where the optimizer keeps some is refused too: the
    run would restart the optimizer (momentum, Adam's moments) from zero and silently take a
    different path than the run it continues.

    Raises
    ------
    CheckpointError
        Naming the archive, the array, its shape or dtype and the model's.

    Examples
    --------
    >>> import numpy as np
    >>> saved = Checkpoint({"w": np.zeros((2, 3))}, {}, 5, {}, {}, {})
    >>> try:
    ...     check_fits_model("ckpt", saved, {"w": ((2, 4), "float64")}, {}, "sgd")
    ... except CheckpointError as error:
    ...     print(error)
    ckpt/params.npz: array 'w' has shape [2, 3], but the model's 'w' has shape [2, 4]
    """
    source = Path(directory).expanduser()
    _check_arrays(source / PARAMS_FILE, checkpoint.params, parameters, "the model", "parameter")
    if optimizer_slots and not checkpoint.optimizer_state:
        names = _listed(sorted(optimizer_slots))
        raise CheckpointError(
            f"{source / OPTIMIZER_FILE}: holds no optimizer state, but the {optimizer} optimizer "
            f"keeps {len(optimizer_slots)} arrays ({names}); resuming would restart them from "
            "zero and change the run. Resume from a checkpoint saved with its optimizer "
            "state, or start a new run"
        )
    _check_arrays(
        source / OPTIMIZER_FILE,
        checkpoint.optimizer_state,
        optimizer_slots,
        f"the {optimizer} optimizer",
        "slot",
    )


def _check_arrays(path: Path, saved: Mapping, expected: ArraySpecs, owner: str, kind: str) -> None:
    missing = sorted(set(expected) - set(saved))
    if missing:
        raise CheckpointError(
            f"{path}: lacks {len(missing)} {kind}(s) of {owner}: {_listed(missing)}; it was "
            "saved by another model or optimizer"
        )
    extra = sorted(set(saved) - set(expected))
    if extra:
        raise CheckpointError(
            f"{path}: holds {len(extra)} array(s) {owner} does not have: {_listed(extra)}; it "
            "was saved by another model or optimizer"
        )
    for name, (shape, dtype) in expected.items():
        array = saved[name]
        if tuple(array.shape) != tuple(shape):
            raise CheckpointError(
                f"{path}: array {name!r} has shape {list(array.shape)}, but {owner}'s "
                f"{name!r} has shape {list(shape)}"
            )
        if array.dtype.name != dtype:
            raise CheckpointError(
                f"{path}: array {name!r} is {array.dtype.name}, but {owner}'s {name!r} is {dtype}"
            )


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:_SHOWN])
    return shown + (", ..." if len(names) > _SHOWN else "")
