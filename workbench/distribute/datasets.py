"""A NumPy data set distributed over a strategy's replicas, batch by batch, exactly as ``fit``
reads it: ``strategy.experimental_distribute_dataset``.

Step k's global batch is :class:`~workbench.data.GlobalBatchSampler`'s (a pure function of
the seed and k; epochs follow one another), and replica r of N gets its rows
``[r*B/N, (r+1)*B/N)`` (:func:`~workbench.data.shard_rows`), so a custom loop that takes the
k-th element at its k-th step sees the batches ``fit`` would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from workbench.config import ConfigError
from workbench.data import Dataset, DatasetError, GlobalBatchSampler, load_dataset, shard_rows
from workbench.distribute.values import PerReplica


class DistributedDataset:
    """Global batches of ``(x, y)``, each split over the replicas as a :class:`PerReplica`.

    Parameters
    ----------
    data : str, Dataset or (x, y)
        A data set name as ``--dataset`` takes it (``"digits"``, ``"synthetic:8:3:96"``, ...;
        its training split), a :class:`~workbench.data.Dataset`, or NumPy arrays ``x`` and
        ``y`` with one row per sample.
    global_batch_size : int
        Rows per step over all replicas; each replica gets ``global_batch_size / replicas``.
    replicas : int
        The strategy's ``num_replicas_in_sync``.
    seed : int
        The batch order's seed (``fit``'s ``seed``); also the split of a named data set.
    epochs : int, optional
        Passes over the data that iterating yields; default: endless (``fit``'s step k is
        the k-th element either way).

    Examples
    --------
    >>> x, y = np.arange(16.0).reshape(8, 2), np.arange(8)
    >>> dataset = DistributedDataset((x, y), global_batch_size=4, replicas=2, seed=0, epochs=1)
    >>> len(dataset)
    2
    >>> first = next(iter(dataset))
    >>> [part[0].shape for part in first.values]
    [(2, 2), (2, 2)]
    """

    def __init__(
        self,
        data: Any,
        global_batch_size: int,
        replicas: int,
        seed: int = 0,
        epochs: int | None = None,
    ) -> None:
        self.x, self.y = _arrays(data, seed)
        for name, value, least in (("seed", seed, 0), ("epochs", epochs, 1)):
            if value is not None and (not isinstance(value, int) or value < least):
                raise ConfigError(name, f"must be an int >= {least}, got {value!r}")
        try:
            self.sampler = GlobalBatchSampler(len(self.y), global_batch_size, seed)
            self.rows = [shard_rows(global_batch_size, r, replicas) for r in range(replicas)]
        except (DatasetError, TypeError) as error:
            raise ConfigError("global_batch_size", str(error)) from None
        self.global_batch_size, self.replicas, self.epochs = global_batch_size, replicas, epochs

    @property
    def steps_per_epoch(self) -> int:
        return self.sampler.steps_per_epoch

    def __len__(self) -> int:
        if self.epochs is None:
            raise TypeError("an endless DistributedDataset has no length (give epochs=)")
        return self.epochs * self.steps_per_epoch

    def batch(self, step: int) -> PerReplica:
        """Step ``step``'s global batch, one ``(x, y)`` slice per replica."""
        indices = self.sampler.batch_indices(step)
        return PerReplica(
            tuple((self.x[indices[rows]], self.y[indices[rows]]) for rows in self.rows)
        )

    def __iter__(self) -> Iterator[PerReplica]:
        step = 0
        while self.epochs is None or step < len(self):
            yield self.batch(step)
            step += 1

    def __repr__(self) -> str:
        return (
            f"DistributedDataset({len(self.y)} samples, global_batch_size="
            f"{self.global_batch_size}, replicas={self.replicas}, seed={self.sampler.seed})"
        )


def _arrays(data: Any, seed: int) -> tuple[Any, np.ndarray]:
    if isinstance(data, str):
        try:
            data = load_dataset(data, seed=seed)
        except DatasetError as error:
            raise ConfigError("dataset", str(error)) from None
    if isinstance(data, Dataset):
        # The inputs as the model reads them (float64; images scaled), batch by batch.
        return data.model_inputs("train", "float64"), data.y_train
    if not isinstance(data, tuple | list) or len(data) != 2:
        raise ConfigError(
            "dataset",
            f"expected a data set name, a Dataset or (x, y) arrays, got {type(data).__name__}",
        )
    x, y = np.asarray(data[0]), np.asarray(data[1])
    if x.ndim < 1 or y.ndim != 1 or len(x) != len(y):
        raise ConfigError(
            "dataset",
            f"x and y need one row per sample (y one label each); got shapes {x.shape} and "
            f"{y.shape}",
        )
    return x, y.astype(np.int64, copy=False)
