"""The run store's listing for a sidebar that asks twice a second while a run is live.

Reading every run's ``status.json`` and ``config.json`` for each request costs in proportion to
the store, most of it runs that ended long ago. Here a run's entry is read again only when one of
those two files changed (modification time, size or inode), or while the run is ``running``:
whether its process is still alive (``lost``) is in no file. A run found lost is left to
:meth:`RunStore.entries`, which marks it in its status.json.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from workbench.store import RunEntry, RunStore, StoredRun, valid_run_id

Stamp = tuple[tuple[int, int, int], tuple[int, int, int] | None]


def _file_stamp(path: Path) -> tuple[int, int, int] | None:
    """(mtime, size, inode) of a regular file; None for anything else (a link is not followed)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return (info.st_mtime_ns, info.st_size, info.st_ino)


def _order(entry: RunEntry) -> tuple[float, str]:
    """The store's listing order: when the run started (a damaged one: when its directory last
    changed), then its id."""
    started = entry.started
    if started is None:
        try:
            started = entry.path.stat().st_mtime
        except OSError:
            started = 0.0
    return (started, entry.run_id)


class ListingCache:
    """:meth:`entries` lists what ``store.entries()`` lists, reading only what changed."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._entries: dict[str, tuple[Stamp, RunEntry]] = {}
        self._lock = threading.Lock()  # the handlers call from worker threads

    def entries(self) -> list[RunEntry]:
        """Every run, oldest first, as :meth:`RunStore.entries` lists it."""
        # The store's own check first: a root that is not this user's private directory is
        # refused (StoreError), as it is for every other read (docs/security.md).
        if not self.store._existing_root():
            return []
        root = self.store.root
        names = [name for name in os.listdir(root) if valid_run_id(name)]
        with self._lock:
            fresh: dict[str, tuple[Stamp, RunEntry]] = {}
            for name in names:
                status = _file_stamp(root / name / "status.json")
                if status is None:
                    continue  # not a run (the store skips it too)
                stamp = (status, _file_stamp(root / name / "config.json"))
                cached = self._entries.get(name)
                if cached is not None and cached[0] == stamp and cached[1].state != "running":
                    fresh[name] = cached
                    continue
                entry = StoredRun(name, root / name).entry()
                if entry.state == "lost":
                    self._entries = {}
                    return self.store.entries()  # marks it lost on disk
                fresh[name] = (stamp, entry)
            self._entries = fresh
            return sorted((entry for _, entry in fresh.values()), key=_order)
