"""Finding the Dask worker processes of clusters a test started, to kill them."""

import psutil


def dask_worker_processes() -> list[psutil.Process]:
    """Worker processes of clusters this test started (spawned by their in-process nannies)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found
