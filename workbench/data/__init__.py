"""Datasets and the global-batch sampler shared by every strategy.

What flows in: a ``--dataset`` spec (``digits``, ``synthetic``,
``synthetic:FEATURES:CLASSES:SAMPLES``, ``tokens:VOCABULARY:LENGTH:CLASSES:SAMPLES``,
``mnist:PATH``, ``fashion-mnist:PATH``, ``cifar10:PATH`` (binary or Python batches),
``npz:PATH``: the user's own arrays) and a seed, or NumPy arrays given to ``fit``. What flows
out: a `Dataset` held in host memory, and for each global step the indices of that step's
global batch plus the row slices each replica or micro-batch takes.

Invariants
----------
- Inputs are stored as their files hold them: uint8 for images (digits: pixel counts), else
  float64; shape ``(n, *input_shape)``. The model reads ``x / input_scale`` (in ``[0, 1]``
  for images; ``tokens``: whole-number token ids), converted batch by batch
  (`ModelInputs`), never as a float copy of the whole set. Labels are int64 in
  ``[0, num_classes)``. Arrays are read-only.
- Nothing is ever downloaded. Only synthetic data depends on the seed; the digits split and file
  datasets are the same for every run.
- Same seed, dataset and batch size -> the same sequence of global batches for every strategy
  (`GlobalBatchSampler` is a pure function of ``(seed, step)``, so resuming continues exactly).
  Replica r of N takes rows ``[r*B/N, (r+1)*B/N)``; micro-batches are consecutive slices.
- Every failure is a `DatasetError` (a ``ValueError``) whose message names the spec, path or
  argument at fault, a ``MemoryError`` included. Files are read only if they are regular
  files, and what they declare is checked against their size and a memory budget before it
  is allocated; labels are below ``MAX_CLASSES`` (docs/security/files.md).
"""

from workbench.data.catalog import (
    DATASET_FORMS,
    dataset_path,
    load_dataset,
    parse_dataset_spec,
)
from workbench.data.dataset import Dataset, DatasetError, ModelInputs, to_model_inputs
from workbench.data.sampler import GlobalBatchSampler, microbatch_rows, shard_rows
from workbench.data.user_arrays import ARRAYS_KIND, fit_arrays_dataset

__all__ = [
    "ARRAYS_KIND",
    "DATASET_FORMS",
    "Dataset",
    "DatasetError",
    "GlobalBatchSampler",
    "ModelInputs",
    "dataset_path",
    "fit_arrays_dataset",
    "load_dataset",
    "microbatch_rows",
    "parse_dataset_spec",
    "shard_rows",
    "to_model_inputs",
]
