"""``tokens:VOCABULARY:LENGTH:CLASSES:SAMPLES``: a synthetic bag-of-tokens classification set,
made for embedding models (the sparse case of parameter servers).

Each class has its own 20 "topic" tokens; a sample of class c is LENGTH token ids, half drawn
from c's topic tokens and half uniformly from the whole vocabulary. An embedding-bag model
(``Embedding``, ``TokenMean``, ``Dense``) learns it, and a batch touches only a few rows of a
large embedding table, so its gradient is row-sparse. Ids are stored as float64 (the
``Dataset`` invariant) and cast to int64 by models that take integer input.
"""

from __future__ import annotations

import numpy as np

from workbench.data.dataset import MAX_CLASSES, Dataset, DatasetError

DEFAULT_TOKENS = (50_000, 16, 10, 12_000)
_TOPIC_TOKENS = 20
_TEST_FRACTION_DENOMINATOR = 6


def parse_tokens_spec(fields: str) -> tuple[int, int, int, int]:
    """``"VOCABULARY:LENGTH:CLASSES:SAMPLES"`` as four validated integers.

    Examples
    --------
    >>> parse_tokens_spec("1000:8:4:600")
    (1000, 8, 4, 600)
    """
    parts = fields.split(":")
    names = ("VOCABULARY", "LENGTH", "CLASSES", "SAMPLES")
    if len(parts) != 4 or not all(p.isascii() and p.isdecimal() and int(p) > 0 for p in parts):
        raise DatasetError(
            f"tokens dataset spec 'tokens:{fields}' must be "
            "tokens:VOCABULARY:LENGTH:CLASSES:SAMPLES (four positive integers)"
        )
    vocabulary, length, classes, samples = (int(p) for p in parts)
    if classes < 2 or vocabulary < classes * _TOPIC_TOKENS:
        raise DatasetError(
            f"tokens {names[2]} must be >= 2 and VOCABULARY >= {_TOPIC_TOKENS} x CLASSES, got "
            f"'tokens:{fields}'"
        )
    if classes > MAX_CLASSES:
        raise DatasetError(f"tokens CLASSES must be at most {MAX_CLASSES}, got {classes}")
    if samples < 2 * classes:
        raise DatasetError(f"tokens SAMPLES must be >= 2*CLASSES, got 'tokens:{fields}'")
    return vocabulary, length, classes, samples


def make_tokens(vocabulary: int, length: int, classes: int, samples: int, seed: int = 0):
    """The data set (deterministic in ``seed``).

    Examples
    --------
    >>> ds = make_tokens(1000, 8, 4, 600)
    >>> ds.x_train.shape, int(ds.x_train.max()) < 1000, ds.num_classes
    ((500, 8), True, 4)
    """
    rng = np.random.default_rng([seed, 7])
    topics = rng.permutation(vocabulary)[: classes * _TOPIC_TOKENS].reshape(classes, -1)
    labels = rng.integers(0, classes, samples)
    from_topic = rng.random((samples, length)) < 0.5
    topic_ids = topics[labels[:, None], rng.integers(0, _TOPIC_TOKENS, (samples, length))]
    ids = np.where(from_topic, topic_ids, rng.integers(0, vocabulary, (samples, length)))
    test = samples // _TEST_FRACTION_DENOMINATOR
    x, y = ids.astype(np.float64), labels.astype(np.int64)
    name = f"tokens:{vocabulary}:{length}:{classes}:{samples}"
    return Dataset(name, x[test:], y[test:], x[:test], y[:test], (length,), classes)
