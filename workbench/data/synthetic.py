"""Seeded synthetic classification data: Gaussian clusters around class-dependent means."""

from __future__ import annotations

import numpy as np

from workbench.data.dataset import MAX_CLASSES, Dataset, DatasetError

DEFAULT_SYNTHETIC = (784, 10, 60000)  # MNIST-sized: what plain `synthetic` means

# Means drawn from U(0.25, 0.75) per feature with noise 0.25 keep nearly all values inside [0, 1]
# before clipping, and leave classes well separated once there are more than a few features.
_MEAN_LOW, _MEAN_HIGH = 0.25, 0.75
_NOISE_STD = 0.25
_TEST_FRACTION_DENOMINATOR = 6  # 1/6 held out: 60000 samples -> 50000 train + 10000 test


def parse_synthetic_spec(fields: str) -> tuple[int, int, int]:
    """Parse ``"FEATURES:CLASSES:SAMPLES"`` into three validated integers.

    Parameters
    ----------
    fields : str
        The part of ``synthetic:FEATURES:CLASSES:SAMPLES`` after the first colon.

    Returns
    -------
    tuple of int
        ``(features, classes, samples)``.

    Raises
    ------
    DatasetError
        If there are not exactly three fields, or a field is out of range; the message names it.

    Examples
    --------
    >>> parse_synthetic_spec("784:10:60000")
    (784, 10, 60000)
    """
    parts = fields.split(":")
    if len(parts) != 3:
        raise DatasetError(
            f"synthetic dataset spec 'synthetic:{fields}' must be "
            "synthetic:FEATURES:CLASSES:SAMPLES (three positive integers)"
        )
    values = []
    for field_name, text in zip(("FEATURES", "CLASSES", "SAMPLES"), parts, strict=True):
        # isdecimal() rejects signs, spaces and '1e3', which int() would quietly accept.
        if not (text.isascii() and text.isdecimal()) or int(text) < 1:
            raise DatasetError(
                f"synthetic {field_name} must be a positive integer, got {text!r} "
                f"in 'synthetic:{fields}'"
            )
        values.append(int(text))
    features, classes, samples = values
    if classes < 2:
        raise DatasetError(f"synthetic CLASSES must be >= 2, got {classes}")
    if classes > MAX_CLASSES:
        raise DatasetError(f"synthetic CLASSES must be at most {MAX_CLASSES}, got {classes}")
    if samples < 2 * classes:
        raise DatasetError(
            f"synthetic SAMPLES must be >= 2*CLASSES = {2 * classes} so that every class "
            f"appears in the training set, got {samples}"
        )
    return features, classes, samples


def make_synthetic(features: int, classes: int, samples: int, seed: int = 0) -> Dataset:
    """Generate a learnable classification problem of ``samples`` points.

    Each class has a mean vector drawn uniformly from ``[0.25, 0.75]^features``; a point is its
    class mean plus Gaussian noise (std 0.25), clipped to ``[0, 1]``. Labels are balanced and
    shuffled within each split; the test split holds ``samples // 6`` points (at least one).

    Parameters
    ----------
    features, classes, samples : int
        Problem size, validated as by :func:`parse_synthetic_spec`.
    seed : int
        The same seed always gives bit-identical arrays.

    Returns
    -------
    Dataset
        Named ``synthetic:FEATURES:CLASSES:SAMPLES``, ``input_shape == (features,)``.

    Examples
    --------
    >>> ds = make_synthetic(20, 3, 60, seed=1)
    >>> ds.x_train.shape, ds.x_test.shape, ds.num_classes
    ((50, 20), (10, 20), 3)
    """
    features, classes, samples = parse_synthetic_spec(f"{features}:{classes}:{samples}")
    if seed < 0:
        raise DatasetError(f"synthetic seed must be >= 0, got {seed}")
    rng = np.random.default_rng(seed)
    means = rng.uniform(_MEAN_LOW, _MEAN_HIGH, size=(classes, features))
    n_test = max(1, samples // _TEST_FRACTION_DENOMINATOR)
    n_train = samples - n_test

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        # Round-robin labels then shuffle: each split is balanced to within one sample per class.
        labels = rng.permutation(np.arange(n, dtype=np.int64) % classes)
        points = rng.standard_normal((n, features))
        points *= _NOISE_STD
        points += means[labels]
        np.clip(points, 0.0, 1.0, out=points)
        return points, labels

    x_train, y_train = split(n_train)
    x_test, y_test = split(n_test)
    return Dataset(
        name=f"synthetic:{features}:{classes}:{samples}",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        input_shape=(features,),
        num_classes=classes,
    )
