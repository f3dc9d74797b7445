"""Collectives on threads: every rank of an in-process ``ThreadTransport`` group at once."""

from __future__ import annotations

import threading

from workbench.parallel.collectives import ThreadTransport


def on_ranks(size, work):
    """``work(rank, transport)`` on ``size`` threads; their results, and the transports.
    A rank's exception fails the caller, naming the rank."""
    transports = ThreadTransport.group(size, timeout=10)
    results, errors = [None] * size, []

    def run(rank):
        try:
            results[rank] = work(rank, transports[rank])
        except Exception as error:  # surfaced below with the rank
            errors.append((rank, error))

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    return results, transports
