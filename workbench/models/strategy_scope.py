"""Which strategy a model is built under, and how ``Sequential.fit`` reaches the layers that
train: models sit below them, so those layers register the training function here
(:func:`register_fit`, done by ``workbench.distribute`` when ``workbench`` is imported) instead
of models importing upwards.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

_current: contextvars.ContextVar[Any] = contextvars.ContextVar("dtrain_strategy", default=None)
_fit: Callable[..., Any] | None = None


def current_strategy() -> Any:
    """The strategy whose ``scope()`` encloses the caller, if any."""
    return _current.get()


@contextlib.contextmanager
def strategy_scope(strategy: Any) -> Iterator[Any]:
    """Models built inside the block remember ``strategy`` (``fit`` trains with it)."""
    token = _current.set(strategy)
    try:
        yield strategy
    finally:
        _current.reset(token)


def register_fit(function: Callable[..., Any]) -> None:
    """``function(strategy_or_None, model, background, **options)`` trains ``model``."""
    global _fit
    _fit = function


def fit_model(strategy: Any, model: Any, background: bool, **options: Any) -> Any:
    if _fit is None:  # only if workbench.models is used without the workbench package
        raise RuntimeError("training needs the workbench package: import workbench first")
    return _fit(strategy, model, background, **options)
