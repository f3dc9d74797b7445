"""scikit-learn's bundled 8x8 digits: the embedded default dataset (no download, no files)."""

from __future__ import annotations

import numpy as np

from workbench.data.dataset import Dataset

_TEST_FRACTION = 0.2
_MAX_PIXEL = 16.0  # load_digits pixels are counts in 0..16
# What every load gives, known without loading (scikit-learn's import alone takes a second):
# the planner sizes a model from them.
DIGITS_INPUT_SHAPE = (1, 8, 8)
DIGITS_CLASSES = 10


def load_digits() -> Dataset:
    """Load scikit-learn's digits as 1x8x8 images with a fixed 80/20 split, stored as their
    pixel counts (uint8, 0..16) and read by the model as ``count / 16`` in ``[0, 1]``.

    The split is stratified and seeded with a constant, never with the run's seed, so every run
    and every strategy is evaluated on the same test images.

    Returns
    -------
    Dataset
        1437 training and 360 test images of shape ``(1, 8, 8)``, 10 classes.

    Examples
    --------
    >>> ds = load_digits()
    >>> ds.x_train.shape, ds.x_test.shape, ds.num_classes
    ((1437, 1, 8, 8), (360, 1, 8, 8), 10)
    """
    # Imported here so `import workbench.data` stays light for code that never loads digits.
    from sklearn.datasets import load_digits as sklearn_load_digits
    from sklearn.model_selection import train_test_split

    bunch = sklearn_load_digits()
    images = bunch.images.astype(np.uint8)[:, np.newaxis, :, :]  # whole counts: exact
    labels = bunch.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=_TEST_FRACTION, stratify=labels, random_state=0
    )
    return Dataset(
        name="digits",
        x_train=np.ascontiguousarray(x_train),
        y_train=np.ascontiguousarray(y_train),
        x_test=np.ascontiguousarray(x_test),
        y_test=np.ascontiguousarray(y_test),
        input_shape=images.shape[1:],
        num_classes=len(bunch.target_names),
        input_scale=_MAX_PIXEL,
    )
