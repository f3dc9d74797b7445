"""What a sharded replica keeps between steps, and how its model reads the parameters.

Every rank holds its shard of each bucket's parameters and optimizer slots
(:mod:`workbench.parallel.data_parallel.shards`). At ZeRO stages 1 and 2 the parameters are
also held whole, as views of one flat buffer per bucket, so the shard a rank updates is a
slice of that buffer and the all-gather after the update writes the other ranks' shards
around it in place. At stage 3 only the shards are held: a read of a parameter gathers its
bucket (one ring all-gather, every rank in the same graph order, so the collectives match),
and the gathered buffer goes once the pass's last read of the bucket has been served and the
interpreter has dropped the views it handed out
(:mod:`workbench.parallel.data_parallel.gathered_reads`).

Under ``--precision mixed-*`` (docs/guide/command-line.md, "Mixed precision") the shard
``shard/<b>`` is the float32 master and ``shard/<b>/half`` its 16-bit copy: the model reads
the 16-bit copies (``<var>/half``), so the whole buffers (stages 1 and 2) and the gathered
buckets (stage 3) are 16-bit, and the all-gathers move half the bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from workbench.optim import compute_copy_name, is_compute_copy
from workbench.parallel.data_parallel.gathered_reads import BACKWARD
from workbench.parallel.data_parallel.shards import ShardLayout, shard_name
from workbench.runtime.device_arrays import DeviceArrays
from workbench.runtime.devices import array_namespace

# (a bucket's flat buffer to fill in place, a key naming the gather) -> None
Gather = Callable[[Any, str], None]

_COPY = compute_copy_name("")  # the suffix of a 16-bit copy's name


class ShardedState(dict[str, Any]):
    """A replica's variable store: its entries are what the device keeps (the shards and
    their slots, named ``shard/<b>`` and ``shard/<b>/<slot>``, which the shard update
    program updates in place); reading a parameter by its model name gives the whole
    parameter (a view of the bucket's buffer, gathered first at stage 3). With ``mixed``
    the model reads the 16-bit copies ``<var>/half``, views of the 16-bit buffers the shards
    ``shard/<b>/half`` belong to."""

    def __init__(
        self,
        layout: ShardLayout,
        rank: int,
        shards: dict[str, Any],
        full: list[Any] | None,
        gather: Gather | None = None,
        reads: Mapping[tuple[str, bool], int] | None = None,
        mixed: bool = False,
    ) -> None:
        super().__init__(shards)
        self.layout, self.rank, self.mixed = layout, rank, mixed
        self.full = full  # stages 1 and 2: each bucket's flat buffer (the shard is a slice)
        self._gather = gather
        self._bucket_of = layout.bucket_of()
        self._where: dict[str, tuple[int, int, tuple[int, ...]]] = {}
        for bucket in layout.buckets:
            for name, shape, offset in zip(bucket.names, bucket.shapes, bucket.offsets):
                self._where[name] = (offset, int(np.prod(shape)), shape)
        # Stage 3: how many reads of each bucket each pass makes, and the buffers gathered
        # for reads still to come (bucket, backward) -> [buffer, reads left].
        self._reads: dict[tuple[int, bool], int] = {}
        for (name, backward), count in (reads or {}).items():
            key = (self._bucket_of[name.removesuffix(_COPY)], backward)
            self._reads[key] = self._reads.get(key, 0) + count
        self._live: dict[tuple[int, bool], list[Any]] = {}

    def __getitem__(self, name: str) -> Any:
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        variable = name.removesuffix(BACKWARD)
        if self.mixed:
            # Only the 16-bit copies are whole: a master lives as its shard alone.
            if not is_compute_copy(variable):
                raise KeyError(name)
            variable = variable.removesuffix(_COPY)
        if variable not in self._where:
            raise KeyError(name)
        index = self._bucket_of[variable]
        if self.full is not None:
            return self._view(self.full[index], variable)
        return self._gathered(index, variable, name.endswith(BACKWARD))

    def computed_shard(self, index: int) -> Any:
        """Bucket ``index``'s shard of what the model computes with: the parameter shard, or
        its 16-bit copy under mixed precision."""
        name = shard_name(index)
        return dict.__getitem__(self, compute_copy_name(name) if self.mixed else name)

    def _view(self, flat: Any, name: str) -> Any:
        offset, size, shape = self._where[name]
        return flat[offset : offset + size].reshape(shape)

    def _gathered(self, index: int, name: str, backward: bool) -> Any:
        """Stage 3: ``name`` as a view of its bucket gathered for this pass (gathered at the
        pass's first read of the bucket, let go of at its last)."""
        key = (index, backward)
        live = self._live.get(key)
        if live is None:
            shard = self.computed_shard(index)
            buffer = _empty_like(shard, self.layout.buckets[index].size)
            lo, hi = self.layout.bounds(index, self.rank)
            buffer[lo:hi] = shard
            if self._gather is None:
                raise RuntimeError("a stage-3 store needs a gather")
            self._gather(buffer, f"g{index}{'b' if backward else 'f'}")
            live = self._live[key] = [buffer, self._reads.get(key, 1)]
        buffer = live[0]
        live[1] -= 1
        if live[1] <= 0:
            del self._live[key]  # the interpreter's views keep it until their last reader
        return self._view(buffer, name)

    def kept(self) -> dict[str, Any]:
        """What the rank keeps between steps, by name: its entries, but at stages 1 and 2 each
        bucket's whole flat buffer under its shard's name (the shard is a slice of it, and
        the rank keeps all of it; counting the buffer itself does not rest on the array
        library exposing a view's base); under mixed precision the whole buffers are the
        16-bit copies', beside the float32 master shards."""
        kept = dict(self.items())
        for index, flat in enumerate(self.full or ()):
            name = shard_name(index)
            kept[compute_copy_name(name) if self.mixed else name] = flat
        return kept

    def end_of_step(self) -> None:
        """Forget buffers gathered for reads that did not come (a run that failed midway)."""
        self._live.clear()


def _empty_like(shard: Any, size: int) -> Any:
    """An uninitialised flat buffer of ``size`` elements, on ``shard``'s device and dtype."""
    return array_namespace(shard).empty(size, dtype=shard.dtype)


def device_shards(
    layout: ShardLayout,
    rank: int,
    arrays: DeviceArrays,
    host_shards: Mapping[str, np.ndarray],
    host_slots: Mapping[str, np.ndarray],
    whole: Mapping[str, np.ndarray] | None,
    half: str | None = None,
) -> tuple[dict[str, Any], list[Any] | None]:
    """(the shards and their slots on the device, each bucket's whole flat buffer or None).

    With ``whole`` (the parameters, stages 1 and 2) each bucket's parameters go to the device
    as one flat buffer and the parameter shard is its slice; otherwise (stage 3) the shards
    alone. With a 16-bit ``half`` (mixed precision) the shards are float32 masters of their
    own, and what was said of the parameters holds of their 16-bit copies (``shard/<b>/half``,
    rounded from the masters)."""
    shards: dict[str, Any] = {}
    full: list[Any] | None = None
    if half is not None:
        shards.update({name: arrays.to_device(value) for name, value in host_shards.items()})
    if whole is not None:
        full = []
        for index, bucket in enumerate(layout.buckets):
            packed = bucket.pack(whole)
            flat = arrays.to_device(packed if half is None else packed.astype(np.dtype(half)))
            lo, hi = layout.bounds(index, rank)
            full.append(flat)
            name = shard_name(index)
            shards[name if half is None else compute_copy_name(name)] = flat[lo:hi]
    elif half is None:
        shards.update({name: arrays.to_device(value) for name, value in host_shards.items()})
    else:
        target = np.dtype(half)
        shards.update(
            {
                compute_copy_name(name): arrays.to_device(value.astype(target))
                for name, value in host_shards.items()
            }
        )
    shards.update({name: arrays.to_device(value) for name, value in host_slots.items()})
    return shards, full
