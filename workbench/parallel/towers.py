"""Towers: one replica's forward pass, loss and gradients, built into a client graph on one
device (TF's in-graph replication builds one tower per device, names prefixed ``tower_<i>``).

A tower reads its inputs from placeholders of its own (``tower_<i>/inputs``, ``/labels``,
``/dropout_seed``) and the variables from whatever tensors the caller gives it: reads of its
own mirrored copies (mirrored), or reads placed on another device (central storage, parameter
servers), in which case the partition pass puts a Send/Recv pair on the edge. Every node of the
tower, backward included, is constrained to the tower's device.

The device feeding a partition finds what each placeholder wants from its name:
:func:`feed_parts` splits ``tower_1/inputs`` into the tower (1) and the feed (``inputs``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import overload

from workbench.ir import GraphBuilder, Tensor, gradients, ops
from workbench.models import ApplyContext, Sequential
from workbench.training.graphs import DROPOUT_SEED, INPUTS, LABELS

TOWER_PREFIX = "tower_"


@dataclass(frozen=True)
class Tower:
    loss: Tensor
    gradients: dict[str, Tensor]  # by the names of ``wrt``, in its order


@overload
def tower_scope(index: int) -> str: ...
@overload
def tower_scope(index: None) -> None: ...
def tower_scope(index: int | None) -> str | None:
    """The name scope of tower ``index`` (None: a between-graph replica, unprefixed)."""
    return None if index is None else f"{TOWER_PREFIX}{index}"


def build_tower(
    builder: GraphBuilder,
    model: Sequential,
    device: str,
    index: int | None,
    parameters: Callable[[], Mapping[str, Tensor]],
    wrt: Mapping[str, Tensor],
    batch_size: int,
    dtype: str,
) -> Tower:
    """Tower ``index`` on ``device``: forward on ``batch_size`` rows, loss, and the gradients
    with respect to ``wrt`` (the variable reads). ``parameters()`` gives the model's
    variables by parameter name; it is called inside the tower, so whatever it builds (the
    concatenation of a partitioned variable's parts) runs on the tower's device."""
    scope = tower_scope(index)
    named = builder.scope(scope) if scope else contextlib.nullcontext()
    with builder.device(device), named:
        input_dtype = "int64" if model.takes_integer_input else dtype
        x = builder.placeholder(INPUTS, (batch_size, *model.input_shape), input_dtype)
        labels = builder.placeholder(LABELS, (batch_size,), "int64")
        seed = builder.placeholder(DROPOUT_SEED, (), "int64") if model.uses_dropout else None
        context = ApplyContext(training=True, dropout_seed=seed)
        logits = model.apply(x, dict(parameters()), context)
        loss = ops.softmax_cross_entropy(logits, labels)
        grads = gradients(builder, loss, list(wrt.values()))
    return Tower(loss, dict(zip(wrt, grads)))


def feed_parts(placeholder: str) -> tuple[int | None, str]:
    """``(tower, feed)`` of a placeholder name: ``("tower_2/labels")`` -> ``(2, "labels")``;
    a name outside any tower has tower None (``learning_rate``, ``ps_0/learning_rate``).

    Examples
    --------
    >>> feed_parts("tower_2/labels"), feed_parts("ps_1/learning_rate"), feed_parts("inputs")
    ((2, 'labels'), (None, 'learning_rate'), (None, 'inputs'))
    """
    scope, _, feed = placeholder.rpartition("/")
    if scope.startswith(TOWER_PREFIX) and scope[len(TOWER_PREFIX) :].isdigit():
        return int(scope[len(TOWER_PREFIX) :]), feed
    return None, feed
