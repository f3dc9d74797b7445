"""Memory sizes as users write them (``--memory-per-device 16GiB``): a number of bytes, with
an optional decimal (kB, MB, GB, TB: powers of 1000) or binary (KiB, MiB, GiB, TiB: powers of
1024) unit, any letter case."""

from __future__ import annotations

import re
from decimal import Decimal

UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*")


def parse_memory_size(text: str) -> int:
    """Bytes in ``text`` (rounded down to a whole byte); ValueError naming what is allowed.

    Examples
    --------
    >>> [parse_memory_size(t) for t in ("16GiB", "512MiB", "1.5GB", "4000000000")]
    [17179869184, 536870912, 1500000000, 4000000000]
    >>> parse_memory_size("lots")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: 'lots' is not a memory size; write a number of bytes with an optional unit: ...
    """
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in UNITS:
        raise ValueError(
            f"{text!r} is not a memory size; write a number of bytes with an optional unit: "
            "B, kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), "
            "e.g. 16GiB"
        )
    nbytes = int(Decimal(match.group(1)) * UNITS[unit])  # exact: no float rounding
    if nbytes < 1:
        raise ValueError(f"{text!r}: a memory size must be at least 1 byte")
    return nbytes
