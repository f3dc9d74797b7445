"""Mixed precision's two copies of each parameter (Micikevicius et al. 2018, "Mixed Precision
Training"; PyTorch AMP, Megatron).

The variable ``<name>`` stays the float32 master weight: the optimizer updates it, its slots
are float32, checkpoints and evaluation read it. Beside it, ``<name>/half`` is its 16-bit copy
(float16 or bfloat16), the one forward and backward compute with; the update graph rounds the
fresh master into it after every update, and every load of the masters rounds it anew, so it
is never saved. In a device's variable store the copy is what the device computes with, the
master is optimizer state (see docs/guide/command-line.md, "Mixed precision").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from workbench.ir import Tensor, ops

# --precision value -> the dtype forward and backward compute in (None: the run's dtype).
PRECISION_DTYPES: dict[str, str | None] = {
    "fp32": None,
    "mixed-fp16": "float16",
    "mixed-bf16": "bfloat16",
}

_COPY_SUFFIX = "/half"


def compute_dtype(precision: str) -> str | None:
    """The 16-bit dtype of ``--precision`` (None for fp32).

    Examples
    --------
    >>> compute_dtype("mixed-bf16"), compute_dtype("fp32")
    ('bfloat16', None)
    """
    if precision not in PRECISION_DTYPES:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISION_DTYPES)}")
    return PRECISION_DTYPES[precision]


def compute_copy_name(variable: str) -> str:
    """The name of ``variable``'s 16-bit copy in a device's variable store."""
    return variable + _COPY_SUFFIX


def is_compute_copy(name: str) -> bool:
    return name.endswith(_COPY_SUFFIX)


def compute_copies(params: Mapping[str, Any], dtype: str | None) -> dict[str, Any]:
    """The 16-bit copies of ``params`` (master weights, host or device arrays), rounded to
    ``dtype``; none when ``dtype`` is None (fp32)."""
    if dtype is None:
        return {}
    target = np.dtype(dtype)
    return {compute_copy_name(name): value.astype(target) for name, value in params.items()}


def without_compute_copies(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` less the 16-bit copies: what is saved and gathered (they follow the masters)."""
    return {name: value for name, value in state.items() if not is_compute_copy(name)}


def emit_refresh(variable: Tensor, name: str, dtype: str, update: Any) -> Any:
    """After the node ``update`` changed the master ``name`` (read as ``variable``), round the
    new master into its 16-bit copy: a fresh read ordered after the update, a ``cast`` and an
    ``assign``, all nodes of the update graph."""
    builder = variable.builder
    master = builder.emit(
        "variable",
        [],
        name=f"{name}/master",
        control_inputs=[update.name],
        var=name,
        shape=variable.shape,
        dtype=variable.dtype,
    )
    copy = compute_copy_name(name)
    current = builder.variable(copy, variable.shape, dtype)
    return ops.assign(current, ops.cast(master, dtype), var=copy)
