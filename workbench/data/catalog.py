"""The ``--dataset`` spec: parse it, validate it, and dispatch to the matching loader."""

from __future__ import annotations

from pathlib import Path

from workbench.data.cifar10 import load_cifar10
from workbench.data.dataset import Dataset, DatasetError
from workbench.data.digits import DIGITS_CLASSES, DIGITS_INPUT_SHAPE, load_digits
from workbench.data.idx import load_idx_dataset
from workbench.data.npz import load_npz
from workbench.data.synthetic import DEFAULT_SYNTHETIC, make_synthetic, parse_synthetic_spec
from workbench.data.tokens import DEFAULT_TOKENS, make_tokens, parse_tokens_spec
from workbench.data.user_arrays import ARRAYS_KIND
from workbench.safe_io.bounded_read import available_memory, format_bytes

DATASET_FORMS = (
    "digits",
    "synthetic",
    "synthetic:FEATURES:CLASSES:SAMPLES",
    "tokens",
    "tokens:VOCABULARY:LENGTH:CLASSES:SAMPLES",
    "mnist:PATH",
    "fashion-mnist:PATH",
    "cifar10:PATH",
    "npz:PATH",
)
_PATH_KINDS = ("mnist", "fashion-mnist", "cifar10", "npz")


def parse_dataset_spec(spec: str) -> tuple[str, str]:
    """Split and validate a dataset spec without touching the file system.

    The command line calls this to reject a bad ``--dataset`` before starting a cluster.

    Parameters
    ----------
    spec : str
        One of the forms in ``DATASET_FORMS``. PATH is everything after the first colon, so it
        may itself contain colons.

    Returns
    -------
    tuple of str
        ``(kind, argument)``: ``kind`` is ``digits``, ``synthetic``, ``mnist``,
        ``fashion-mnist`` or ``cifar10``; ``argument`` is ``""``, ``"FEATURES:CLASSES:SAMPLES"``
        (filled in with the default for plain ``synthetic``) or the PATH.

    Raises
    ------
    DatasetError
        For an unknown kind (the message lists the allowed forms), a missing PATH, an argument
        given to ``digits``, or bad synthetic numbers.

    Examples
    --------
    >>> parse_dataset_spec("synthetic")
    ('synthetic', '784:10:60000')
    >>> parse_dataset_spec("mnist:/data/mnist")
    ('mnist', '/data/mnist')
    """
    kind, has_argument, argument = spec.strip().partition(":")
    if kind == "digits" and not has_argument:
        return kind, ""
    if kind == "synthetic":
        if not has_argument:
            return kind, ":".join(str(value) for value in DEFAULT_SYNTHETIC)
        parse_synthetic_spec(argument)
        return kind, argument
    if kind == "tokens":
        if not has_argument:
            return kind, ":".join(str(value) for value in DEFAULT_TOKENS)
        parse_tokens_spec(argument)
        return kind, argument
    if kind == ARRAYS_KIND and argument:
        return kind, argument  # arrays given to fit() in Python: shipped, never loaded by name
    if kind in _PATH_KINDS:
        if not argument.strip():
            what = "a .npz file" if kind == "npz" else "a directory"
            raise DatasetError(f"dataset {spec!r} needs {what}: use {kind}:PATH")
        return kind, argument
    raise DatasetError(f"unknown dataset {spec!r}; expected one of: {', '.join(DATASET_FORMS)}")


def dataset_path(spec: str) -> Path | None:
    """The file or directory a data set spec reads (None: one made in memory).

    Examples
    --------
    >>> dataset_path("cifar10:/data/cifar"), dataset_path("synthetic:16:4:120")
    (PosixPath('/data/cifar'), None)
    """
    kind, argument = parse_dataset_spec(spec)
    return Path(argument).expanduser() if kind in _PATH_KINDS else None


def load_dataset(spec: str, seed: int = 0) -> Dataset:
    """Load the dataset a ``--dataset`` spec names.

    Parameters
    ----------
    spec : str
        ``digits``, ``synthetic``, ``synthetic:FEATURES:CLASSES:SAMPLES``, ``mnist:PATH``,
        ``fashion-mnist:PATH`` or ``cifar10:PATH``.
    seed : int
        Only synthetic data depends on it; file datasets and the digits split never do.

    Returns
    -------
    Dataset

    Raises
    ------
    DatasetError
        For a bad spec, a missing directory or file, a malformed file, or one that declares
        more than memory allows (a ``MemoryError`` never escapes).

    Examples
    --------
    >>> ds = load_dataset("synthetic:16:4:120", seed=3)
    >>> ds.name, ds.x_train.shape, ds.num_classes
    ('synthetic:16:4:120', (100, 16), 4)
    """
    kind, argument = parse_dataset_spec(spec)
    try:
        return _load(kind, argument, spec, seed)
    except MemoryError:
        # The loaders check what a file declares before allocating; this is what is left (a
        # conversion, a generated set): still a user error naming the data set, not a crash.
        raise DatasetError(
            f"dataset {spec!r} does not fit in memory ({format_bytes(available_memory())} "
            "available now); use a smaller data set or free memory"
        ) from None


def dataset_signature(spec: str, seed: int = 0) -> tuple[tuple[int, ...], int]:
    """``(input_shape, num_classes)`` of the data set ``spec``: what a model is built for, without
    loading the bundled digits (the planner needs no more).

    Examples
    --------
    >>> dataset_signature("digits")
    ((1, 8, 8), 10)
    >>> dataset_signature("synthetic:16:4:120")
    ((16,), 4)
    """
    if parse_dataset_spec(spec)[0] == "digits":
        return DIGITS_INPUT_SHAPE, DIGITS_CLASSES
    dataset = load_dataset(spec, seed)
    return tuple(dataset.input_shape), dataset.num_classes


def _load(kind: str, argument: str, spec: str, seed: int) -> Dataset:
    if kind == "digits":
        return load_digits()
    if kind == "synthetic":
        features, classes, samples = parse_synthetic_spec(argument)
        return make_synthetic(features, classes, samples, seed=seed)
    if kind == "tokens":
        return make_tokens(*parse_tokens_spec(argument), seed=seed)
    if kind == "cifar10":
        return load_cifar10(Path(argument))
    if kind == "npz":
        return load_npz(Path(argument))
    if kind == ARRAYS_KIND:
        raise DatasetError(
            f"dataset {spec!r} is NumPy arrays given to fit(x=..., y=...) in Python: it has no "
            "file to load by name (give the arrays to fit, or save them with numpy.savez and "
            "use npz:PATH)"
        )
    return load_idx_dataset(Path(argument), name=kind)
