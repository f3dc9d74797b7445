"""Programs for pushing gradients to the devices that hold the variables and pulling them back.

Central storage (``workbench/parallel/data_parallel/replica.py``): every replica sends its
gradient to the storage device, rank 0, which sums in rank order, applies the update and sends
the new values to each replica in rank order; the storage device is a worker too, so its own
gradient does not travel. Parameter servers (``workbench/parallel/parameter_server``): each
worker pushes each shard its part, in shard order; a synchronous shard sums the pushes, updates,
and answers each worker's pull of the next step, which the worker makes in shard order. The
shard here takes the pushes in worker order, where the real one takes them as they come: the
same when workers are alike, the slowest worker's lateness otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.simulate.programs import MAIN, Action, Compute, Recv, Send


def push_pull(
    workers: Sequence[str],
    servers: Sequence[str],
    nbytes: int | Sequence[int],
    add_seconds_per_byte: float,
    key: str,
    update_seconds: float | Sequence[float] = 0.0,
    *,
    stream: str = MAIN,
) -> dict[str, list[Action]]:
    """Every worker pushes ``nbytes[k]`` to server k (one number: the same for each), each
    server sums them, updates for ``update_seconds[k]``, and sends its part back to every
    worker. Phases ``ps-push``, ``update`` and ``ps-pull``; a device may be both a worker and
    a server (central storage).

    Examples
    --------
    >>> programs = push_pull(["w0", "w1"], ["w0"], 8, 0.0, "g", update_seconds=1.0)
    >>> [(type(a).__name__, a.phase) for a in programs["w0"]]
    [('Recv', 'ps-push'), ('Compute', 'update'), ('Send', 'ps-pull')]
    >>> [type(a).__name__ for a in programs["w1"]]
    ['Send', 'Recv']
    """
    shares = [nbytes] * len(servers) if isinstance(nbytes, int) else list(nbytes)
    updates = (
        [update_seconds] * len(servers)
        if isinstance(update_seconds, int | float)
        else list(update_seconds)
    )
    if len(shares) != len(servers) or len(updates) != len(servers):
        raise ValueError(f"need bytes and update seconds for each of the {len(servers)} servers")
    push, pull = f"{key}/push", f"{key}/pull"
    programs: dict[str, list[Action]] = {device: [] for device in [*workers, *servers]}
    for worker in workers:
        programs[worker] += [
            Send(server, share, push, "ps-push", stream)
            for server, share in zip(servers, shares)
            if server != worker
        ]
    for server, share, update in zip(servers, shares, updates):
        for worker in workers:
            if worker == server:
                continue
            programs[server].append(Recv(worker, push, "ps-push", stream))
            if share * add_seconds_per_byte > 0:
                programs[server].append(
                    Compute(share * add_seconds_per_byte, "add", "ps-push", stream)
                )
        if update > 0:
            programs[server].append(Compute(update, "update", "update", stream))
        programs[server] += [
            Send(worker, share, pull, "ps-pull", stream) for worker in workers if worker != server
        ]
    for worker in workers:
        programs[worker] += [
            Recv(server, pull, "ps-pull", stream) for server in servers if server != worker
        ]
    return programs
