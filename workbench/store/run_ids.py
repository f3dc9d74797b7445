"""What a run id may be: the name of one directory of the store, never a path out of it.

The store's own ids are ``<date>-<time>-<strategy>-<6 hex>`` (``new_run_id`` in
``workbench/launch/run_link.py``; a strategy's name is lowercase letters, digits and
hyphens). Every front end that takes a run id (the server's routes, ``dtrain export``, the
magics) checks it with :func:`valid_run_id` before it touches the file system, so ``..``,
``/``, hidden names and names longer than a file name may be all answer "no such run".
"""

from __future__ import annotations

import re

MAX_RUN_ID_LENGTH = 128
# Letters, digits, ".", "_" and "-", beginning with a letter or digit: no separator, no "."
# or ".." and no hidden name (the store's temporary files begin with ".").
RUN_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]*"
RUN_ID_RULE = (
    f"letters, digits, '.', '_' and '-', beginning with a letter or digit, "
    f"at most {MAX_RUN_ID_LENGTH} characters"
)
_RUN_ID = re.compile(RUN_ID_PATTERN)


def valid_run_id(run_id: object) -> bool:
    """Whether ``run_id`` may name a run of the store (see :data:`RUN_ID_RULE`).

    Examples
    --------
    >>> valid_run_id("20240102-030405-mirrored-a1b2c3"), valid_run_id("../x")
    (True, False)
    >>> valid_run_id("a" * 129), valid_run_id(".hidden")
    (False, False)
    """
    return (
        isinstance(run_id, str)
        and len(run_id) <= MAX_RUN_ID_LENGTH
        and _RUN_ID.fullmatch(run_id) is not None
    )
