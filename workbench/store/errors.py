"""The run store's one error for its users: the store cannot be used or written as it is."""

from __future__ import annotations


class StoreError(Exception):
    """The store's root is not this user's private directory (another user's, a symbolic
    link, open to others), or a run could not be recorded (a full disk, an I/O error). The
    message names the path and what is wrong; front ends print it as a one-line error."""
