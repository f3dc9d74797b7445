"""Files other local users cannot read, plant or disturb, and JSON every reader accepts
(docs/security.md).

The lowest layer: the run store, the runtime's shared-memory channels and the loaders all
create and open their files through it.
"""

from workbench.safe_io.private_paths import (
    ForeignPathError,
    ensure_private_directory,
    make_private_fifo,
    open_exclusive,
    open_owned,
    verify_owned,
)
from workbench.safe_io.strict_json import finite_or_none, strict_dumps

__all__ = [
    "ForeignPathError",
    "ensure_private_directory",
    "finite_or_none",
    "make_private_fifo",
    "open_exclusive",
    "open_owned",
    "strict_dumps",
    "verify_owned",
]
