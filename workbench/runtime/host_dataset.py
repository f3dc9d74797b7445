"""The data set held once per host: one read-only shared-memory copy that every device of
the run on that host maps, in the data set's stored type (bytes for images).

Before a run's devices are set up, the client stages the data set (:func:`stage_dataset`):

1. one worker per host (its *leader*) loads the data set from its own disk, or takes the
   copy the client ships (arrays given to ``fit``, or ``--ship-data``: sent once per host,
   not once per worker), and writes it into a shared-memory segment readable by its owner
   only, in the run's private directory (``workbench/runtime/shared_memory.py``);
2. every worker of the host maps that segment read-only and keeps the mapping for the run;
   a worker that cannot see the segment (another ``/dev/shm`` than its leader's) becomes a
   leader itself;
3. the leaders unlink the segment's name: the memory lives exactly as long as some device
   maps it, so neither a finished nor a crashed run leaves a segment behind.

A device program then takes its data set from :func:`worker_dataset`, and converts each batch
to the model's dtype as it gathers it (:class:`workbench.data.ModelInputs`).
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.data import Dataset, load_dataset
from workbench.runtime.shared_memory import (
    has_room,
    hold_run_directory,
    release_run_directory,
    run_directory,
    unlink_run_segments,
)
from workbench.safe_io import open_exclusive, open_owned

_ARRAYS = ("x_train", "y_train", "x_test", "y_test")
_ALIGNMENT = 64  # every array starts on a cache line

# This worker process's data sets, by run id (kept until the run is forgotten on the worker).
_held: dict[str, Dataset] = {}
# The runs whose directory this worker holds as its host's leader, until its segment's name
# is unlinked.
_leading: set[str] = set()


@dataclass(frozen=True)
class SharedDataset:
    """Where a host's copy of a data set lies and how to read it (pickled to its workers)."""

    path: str
    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    input_scale: float
    layout: tuple[tuple[str, str, tuple[int, ...], int], ...]  # (array, dtype, shape, offset)


def segment_path(run_id: str, worker_address: str) -> str:
    """The segment a leader writes: in the run's directory (so a crashed run's is swept with
    its other segments), named after the leader (so two leaders never share a name)."""
    leader = hashlib.sha1(worker_address.encode()).hexdigest()[:8]
    return os.path.join(run_directory(run_id), f"dataset-{leader}")


def write_segment(path: str, dataset: Dataset) -> SharedDataset:
    """Write ``dataset``'s arrays into a new shared-memory file at ``path``, readable and
    writable by its owner only (something already at ``path`` raises
    :class:`~workbench.safe_io.ForeignPathError`)."""
    layout, offset = [], 0
    for name in _ARRAYS:
        array = getattr(dataset, name)
        layout.append((name, array.dtype.str, tuple(array.shape), offset))
        offset += -(-array.nbytes // _ALIGNMENT) * _ALIGNMENT
    descriptor = open_exclusive(path)
    try:
        os.ftruncate(descriptor, max(offset, 1))
        with mmap.mmap(descriptor, max(offset, 1)) as memory:
            for name, dtype, shape, start in layout:
                target = np.frombuffer(memory, dtype=dtype, count=int(np.prod(shape)), offset=start)
                target[:] = getattr(dataset, name).reshape(-1)
                del target  # the mapping closes only once no array points into it
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(descriptor)
    return SharedDataset(
        path,
        dataset.name,
        dataset.input_shape,
        dataset.num_classes,
        dataset.input_scale,
        tuple(layout),
    )


def read_segment(shared: SharedDataset) -> Dataset:
    """The data set in ``shared``'s segment, its arrays read-only views of one mapping (which
    stays open while any of them is alive). The segment must be this user's private file."""
    descriptor = open_owned(shared.path, os.O_RDONLY)
    try:
        size = os.fstat(descriptor).st_size
        memory = mmap.mmap(descriptor, size, access=mmap.ACCESS_READ)
    finally:
        os.close(descriptor)
    arrays = {
        name: np.frombuffer(memory, dtype=dtype, count=int(np.prod(shape)), offset=start).reshape(
            shape
        )
        for name, dtype, shape, start in shared.layout
    }
    return Dataset(
        name=shared.name,
        input_shape=shared.input_shape,
        num_classes=shared.num_classes,
        input_scale=shared.input_scale,
        **arrays,
    )


# --- on the workers ---------------------------------------------------------------------------


def publish_dataset(
    run_id: str, spec: str, seed: int, shipped: Dataset | None, dask_worker: Any = None
) -> SharedDataset | None:
    """On a host's leader: load (or take the shipped) data set and share it on this host;
    hold it. Returns the :class:`SharedDataset`, or None when /dev/shm has no room (this
    worker then holds a private copy)."""
    dataset = shipped if shipped is not None else load_dataset(spec, seed=seed)
    if not has_room(dataset.nbytes):
        _held[run_id] = dataset
        return None
    if run_id not in _leading:
        hold_run_directory(run_id)
        _leading.add(run_id)
    path = segment_path(run_id, dask_worker.address)
    with contextlib.suppress(FileNotFoundError):  # left by a failed attempt of this run id
        os.unlink(path)
    shared = write_segment(path, dataset)
    del dataset
    _held[run_id] = read_segment(shared)
    return shared


def attach_dataset(run_id: str, shared: SharedDataset) -> bool:
    """On a host's other workers: map the leader's copy and hold it (False: this worker does
    not see the leader's /dev/shm)."""
    try:
        _held[run_id] = read_segment(shared)
    except FileNotFoundError:
        return False
    return True


def hold_private_copy(run_id: str, spec: str, seed: int, shipped: Dataset | None) -> None:
    """On a worker whose host could not share: hold a copy of its own."""
    _held[run_id] = shipped if shipped is not None else load_dataset(spec, seed=seed)


def release_segment(run_id: str, path: str) -> None:
    """On a leader, once every worker of its host mapped the segment: unlink its name, and
    the run's directory if nothing else of the run is there yet."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    _stop_leading(run_id)


def _stop_leading(run_id: str) -> None:
    if run_id in _leading:
        _leading.discard(run_id)
        release_run_directory(run_id)
        unlink_run_segments(run_id)


def forget_dataset(run_id: str) -> None:
    """Drop this worker's mapping of run ``run_id``'s data set (and its hold on the run's
    directory, if staging ended before the leader unlinked its segment)."""
    _held.pop(run_id, None)
    _stop_leading(run_id)


def worker_dataset(run_id: str, spec: str, seed: int) -> Dataset:
    """The data set a device of run ``run_id`` trains on: the host's shared copy staged for
    the run, else (a program started outside a staged run) loaded here."""
    held = _held.get(run_id)
    return held if held is not None else load_dataset(spec, seed=seed)


# --- on the client ----------------------------------------------------------------------------


def stage_dataset(
    client: Any,
    run_id: str,
    addresses: list[str],
    spec: str,
    seed: int,
    shipped: Dataset | None,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[str, str]:
    """Give every worker in ``addresses`` the run's data set, held once per host (see the
    module's docstring); ``shipped``: the client's copy to send (once per host) instead of
    each host loading ``spec``. Returns how each worker holds it: ``leader`` (it wrote the
    host's copy), ``shared`` (it maps its leader's) or ``private`` (a copy of its own: its
    host's /dev/shm had no room)."""
    from distributed.comm.addressing import get_address_host

    groups: dict[str, list[str]] = {}
    for address in addresses:
        groups.setdefault(get_address_host(address), []).append(address)
    pending = list(groups.values())
    held: dict[str, str] = {}
    while pending:
        leaders = [group[0] for group in pending]
        published = client.run(publish_dataset, run_id, spec, seed, shipped, workers=leaders)
        unseen: list[list[str]] = []
        for leader, *members in pending:
            shared = published[leader]
            held[leader] = "private" if shared is None else "leader"
            if shared is None:
                if members:
                    client.run(hold_private_copy, run_id, spec, seed, shipped, workers=members)
                held.update(dict.fromkeys(members, "private"))
                continue
            seen = client.run(attach_dataset, run_id, shared, workers=members) if members else {}
            client.run(release_segment, run_id, shared.path, workers=[leader])
            held.update((member, "shared") for member in members if seen[member])
            # A worker that does not see its leader's /dev/shm leads a group of its own.
            unseen += [[member] for member in members if not seen[member]]
        pending = unseen
    copies = sum(state != "shared" for state in held.values())
    how = "sent by this client" if shipped is not None else "loaded on each host"
    progress(
        f"[data] {spec}: {copies} {'copy' if copies == 1 else 'copies'} for "
        f"{len(addresses)} devices ({how})"
    )
    return held
