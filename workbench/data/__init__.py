"""Datasets and the global-batch sampler shared by every strategy.

What flows in: a ``--dataset`` spec (``digits``, ``synthetic``,
``synthetic:FEATURES:CLASSES:SAMPLES``, ``tokens:VOCABULARY:LENGTH:CLASSES:SAMPLES``,
``mnist:PATH``, ``fashion-mnist:PATH``, ``cifar10:PATH``, ``npz:PATH``: the user's own arrays)
and a seed. What flows out: a
`Dataset` held in host memory, and for each global step the indices of that step's global
batch plus the row slices each replica or micro-batch takes.

Invariants
----------
- Inputs are float64 in ``[0, 1]`` (``tokens``: whole-number token ids) with shape
  ``(n, *input_shape)``; labels are int64 in ``[0, num_classes)``. Arrays are read-only.
- Nothing is ever downloaded. Only synthetic data depends on the seed; the digits split and file
  datasets are the same for every run.
- Same seed, dataset and batch size -> the same sequence of global batches for every strategy
  (`GlobalBatchSampler` is a pure function of ``(seed, step)``, so resuming continues exactly).
  Replica r of N takes rows ``[r*B/N, (r+1)*B/N)``; micro-batches are consecutive slices.
- Every failure is a `DatasetError` (a ``ValueError``) whose message names the spec, path or
  argument at fault.
"""

from workbench.data.catalog import (
    DATASET_FORMS,
    dataset_path,
    load_dataset,
    parse_dataset_spec,
)
from workbench.data.dataset import Dataset, DatasetError
from workbench.data.sampler import GlobalBatchSampler, microbatch_rows, shard_rows

__all__ = [
    "DATASET_FORMS",
    "Dataset",
    "DatasetError",
    "GlobalBatchSampler",
    "dataset_path",
    "load_dataset",
    "microbatch_rows",
    "parse_dataset_spec",
    "shard_rows",
]
