"""JSON that every parser accepts: a float that is not finite (a diverged loss, an infinite
rate) is written as ``null``, never as the ``NaN``/``Infinity`` tokens that Python's ``json``
emits by default and JavaScript's ``JSON.parse`` rejects."""

from __future__ import annotations

import json
import math
from typing import Any


def finite_or_none(value: Any) -> Any:
    """``value`` with every non-finite float inside it (dicts, lists, tuples) replaced by
    None; everything else as it was."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_none(item) for item in value]
    return value


def strict_dumps(value: Any, **options: Any) -> str:
    """``json.dumps`` of ``value`` with non-finite floats as null (``allow_nan=False`` then
    guards what the walk cannot see, such as a ``default`` hook's output)."""
    try:  # most values hold only finite numbers: one pass, no copy
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:
        return json.dumps(finite_or_none(value), allow_nan=False, **options)
