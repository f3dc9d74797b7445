"""Global batches that are identical for every strategy, and how replicas slice them.

Every strategy draws the same global batch for a step (docs/architecture/determinism.md, "Same
data, same result"); data-parallel replicas and pipeline micro-batches then take consecutive row
slices of it. Because the slices tile the batch exactly, averaging per-slice mean gradients
equals the global-batch mean gradient.
"""

from __future__ import annotations

import numpy as np

from workbench.data.dataset import DatasetError


class GlobalBatchSampler:
    """Random-access sampler: global step -> indices of that step's global batch.

    Epoch ``e`` visits ``np.random.default_rng([seed, e]).permutation(num_samples)`` in
    consecutive chunks of ``batch_size``; the last partial chunk is dropped. ``batch_indices``
    is a pure function of ``(seed, step)``, so a resumed run continues with exactly the batches
    an uninterrupted run would have seen.

    Parameters
    ----------
    num_samples : int
        Size of the training set.
    batch_size : int
        Global batch size, ``1 <= batch_size <= num_samples``.
    seed : int
        Non-negative run seed.

    Examples
    --------
    >>> sampler = GlobalBatchSampler(num_samples=10, batch_size=4, seed=0)
    >>> sampler.steps_per_epoch
    2
    >>> sampler.batch_indices(3).shape, sampler.epoch_of(3)
    ((4,), 1)
    """

    def __init__(self, num_samples: int, batch_size: int, seed: int) -> None:
        if num_samples < 1:
            raise DatasetError(f"num_samples must be >= 1, got {num_samples}")
        if not 1 <= batch_size <= num_samples:
            raise DatasetError(
                f"batch_size must be between 1 and the number of training samples "
                f"({num_samples}), got {batch_size}"
            )
        if seed < 0:
            raise DatasetError(f"seed must be >= 0, got {seed}")
        self.num_samples = int(num_samples)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.steps_per_epoch = self.num_samples // self.batch_size
        # Steps are read in order almost always, so one cached epoch saves re-permuting per step.
        # One tuple, swapped in a single assignment, so concurrent readers never see a mix.
        self._cache: tuple[int, np.ndarray] = (-1, np.empty(0, dtype=np.int64))

    def epoch_of(self, step: int) -> int:
        """Return the 0-based epoch that global ``step`` falls in.

        Examples
        --------
        >>> GlobalBatchSampler(10, 5, seed=0).epoch_of(4)
        2
        """
        self._check_step(step)
        return step // self.steps_per_epoch

    def permutation(self, epoch: int) -> np.ndarray:
        """Return the (read-only) int64 order in which ``epoch`` visits the samples.

        Examples
        --------
        >>> sorted(GlobalBatchSampler(5, 5, seed=1).permutation(0).tolist())
        [0, 1, 2, 3, 4]
        """
        if epoch < 0:
            raise DatasetError(f"epoch must be >= 0, got {epoch}")
        cached_epoch, order = self._cache
        if cached_epoch != epoch:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
            order = order.astype(np.int64, copy=False)
            order.flags.writeable = False
            self._cache = (epoch, order)
        return order

    def batch_indices(self, step: int) -> np.ndarray:
        """Return the int64 sample indices of the global batch at ``step`` (0-based, global).

        Examples
        --------
        >>> sampler = GlobalBatchSampler(8, 4, seed=0)
        >>> first_epoch = np.concatenate([sampler.batch_indices(0), sampler.batch_indices(1)])
        >>> sorted(first_epoch.tolist())
        [0, 1, 2, 3, 4, 5, 6, 7]
        """
        epoch = self.epoch_of(step)
        start = (step % self.steps_per_epoch) * self.batch_size
        return self.permutation(epoch)[start : start + self.batch_size].copy()

    def _check_step(self, step: int) -> None:
        if step < 0:
            raise DatasetError(f"step must be >= 0, got {step}")

    def __repr__(self) -> str:
        return (
            f"GlobalBatchSampler(num_samples={self.num_samples}, batch_size={self.batch_size}, "
            f"seed={self.seed})"
        )


def _contiguous_part(batch_size: int, part: int, parts: int, one: str, many: str) -> slice:
    if parts < 1:
        raise DatasetError(f"{many} must be >= 1, got {many}={parts}")
    if not 0 <= part < parts:
        raise DatasetError(f"{one} index must be in 0..{parts - 1}, got {part}")
    if batch_size < 1 or batch_size % parts != 0:
        raise DatasetError(
            f"batch_size={batch_size} must be a positive multiple of {many}={parts} "
            f"so that every {one} gets the same number of rows"
        )
    size = batch_size // parts
    return slice(part * size, (part + 1) * size)


def shard_rows(batch_size: int, replica: int, replicas: int) -> slice:
    """Rows ``[r*B/N, (r+1)*B/N)`` of a global batch that data-parallel ``replica`` r of N takes.

    Raises
    ------
    DatasetError
        Naming ``batch_size`` and ``replicas`` if the batch does not split evenly.

    Examples
    --------
    >>> shard_rows(batch_size=8, replica=1, replicas=4)
    slice(2, 4, None)
    """
    return _contiguous_part(batch_size, replica, replicas, "replica", "replicas")


def microbatch_rows(batch_size: int, microbatch: int, microbatches: int) -> slice:
    """Rows of a batch that pipeline micro-batch ``microbatch`` of ``microbatches`` takes.

    Raises
    ------
    DatasetError
        Naming ``batch_size`` and ``microbatches`` if the batch does not split evenly.

    Examples
    --------
    >>> microbatch_rows(batch_size=6, microbatch=2, microbatches=3)
    slice(4, 6, None)
    """
    return _contiguous_part(batch_size, microbatch, microbatches, "microbatch", "microbatches")
