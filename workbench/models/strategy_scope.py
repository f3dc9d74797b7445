"""Which strategy a model is built under, and how a model reaches the layers that train it.

Models sit below the layers that train them, so those layers register their functions here
instead of models importing upwards: ``workbench.distribute`` registers how ``Sequential.fit``
trains (:func:`register_fit`), how ``Sequential.compile`` binds a model to its strategy's custom
training loop (:func:`register_compile`) and how ``Sequential.get_weights`` fetches the
variables (:func:`register_weights`), all when ``workbench`` is imported.

Inside ``strategy.run(step_fn)`` the device program that runs ``step_fn`` on a replica's
worker enters :func:`replica_scope` with its replica context; ``Sequential.compute_gradients``
and ``Sequential.optimizer_apply`` find it with :func:`current_replica_context`. The context
is whatever object the device side passes (duck-typed), so models import nothing from it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

_current: contextvars.ContextVar[Any] = contextvars.ContextVar("dtrain_strategy", default=None)
_replica: contextvars.ContextVar[Any] = contextvars.ContextVar("dtrain_replica", default=None)
_fit: Callable[..., Any] | None = None
_compile: Callable[..., Any] | None = None
_weights: Callable[..., Any] | None = None

_NEEDS_WORKBENCH = "training needs the workbench package: import workbench first"


def current_strategy() -> Any:
    """The strategy whose ``scope()`` encloses the caller, if any."""
    return _current.get()


@contextlib.contextmanager
def _bound(variable: contextvars.ContextVar, value: Any) -> Iterator[Any]:
    """``variable`` holds ``value`` inside the block, and what it held before after it."""
    token = variable.set(value)
    try:
        yield value
    finally:
        variable.reset(token)


def strategy_scope(strategy: Any) -> contextlib.AbstractContextManager[Any]:
    """Models built inside the block remember ``strategy`` (``fit`` trains with it)."""
    return _bound(_current, strategy)


def current_replica_context() -> Any:
    """The replica context of the ``strategy.run`` step function running here, if any."""
    return _replica.get()


def replica_scope(context: Any) -> contextlib.AbstractContextManager[Any]:
    """Run a step function with ``context`` as its replica context (device side)."""
    return _bound(_replica, context)


def register_fit(function: Callable[..., Any]) -> None:
    """``function(strategy_or_None, model, background, **options)`` trains ``model``."""
    global _fit
    _fit = function


def register_compile(function: Callable[..., Any]) -> None:
    """``function(strategy_or_None, model, options)`` binds ``model`` and ``fit``'s
    ``options`` to a strategy's custom training loop and returns that strategy."""
    global _compile
    _compile = function


def register_weights(function: Callable[..., Any]) -> None:
    """``function(strategy_or_None, model)`` returns the model's variables by name."""
    global _weights
    _weights = function


def fit_model(strategy: Any, model: Any, background: bool, **options: Any) -> Any:
    if _fit is None:  # only if workbench.models is used without the workbench package
        raise RuntimeError(_NEEDS_WORKBENCH)
    return _fit(strategy, model, background, **options)


def compile_model(strategy: Any, model: Any, options: dict[str, Any]) -> Any:
    if _compile is None:
        raise RuntimeError(_NEEDS_WORKBENCH)
    return _compile(strategy, model, options)


def model_weights(strategy: Any, model: Any) -> Any:
    if _weights is None:
        raise RuntimeError(_NEEDS_WORKBENCH)
    return _weights(strategy, model)
