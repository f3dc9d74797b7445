"""The --dataset spec: every form dispatches, and bad specs say what is allowed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from workbench.data import DATASET_FORMS, DatasetError, load_dataset, parse_dataset_spec

MakeDir = Callable[..., tuple[Path, dict]]  # see conftest


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("digits", ("digits", "")),
        ("synthetic", ("synthetic", "784:10:60000")),
        ("synthetic:32:4:100", ("synthetic", "32:4:100")),
        ("mnist:/data/mnist", ("mnist", "/data/mnist")),
        ("fashion-mnist:~/fmnist", ("fashion-mnist", "~/fmnist")),
        ("cifar10:C:/data/cifar", ("cifar10", "C:/data/cifar")),
    ],
)
def test_parse_every_allowed_form(spec: str, expected: tuple[str, str]) -> None:
    assert parse_dataset_spec(spec) == expected


@pytest.mark.parametrize("spec", ["imagenet", "MNIST:/x", "digits:extra", "", "cifar:/x"])
def test_unknown_dataset_lists_every_allowed_form(spec: str) -> None:
    with pytest.raises(DatasetError) as raised:
        load_dataset(spec)
    message = str(raised.value)
    assert repr(spec) in message
    for form in DATASET_FORMS:
        assert form in message
    assert DATASET_FORMS == (
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


@pytest.mark.parametrize("spec", ["mnist", "fashion-mnist:", "cifar10:  "])
def test_path_forms_require_a_path(spec: str) -> None:
    with pytest.raises(DatasetError, match="PATH"):
        load_dataset(spec)


def test_dataset_error_is_a_value_error() -> None:
    assert issubclass(DatasetError, ValueError)


def test_file_datasets_dispatch_by_kind(
    make_idx_dir: MakeDir, make_cifar_dir: MakeDir, tmp_path: Path
) -> None:
    idx_dir, _ = make_idx_dir("with:colon")  # PATH is everything after the first colon
    cifar_dir, _ = make_cifar_dir(records=2)
    assert load_dataset(f"mnist:{idx_dir}").name == "mnist"
    assert load_dataset(f"fashion-mnist:{idx_dir}").name == "fashion-mnist"
    assert load_dataset(f"cifar10:{cifar_dir}").input_shape == (3, 32, 32)


def test_only_synthetic_data_depends_on_the_seed(make_idx_dir: MakeDir) -> None:
    idx_dir, _ = make_idx_dir()
    for spec in (f"mnist:{idx_dir}", "digits"):
        np.testing.assert_array_equal(
            load_dataset(spec, seed=1).x_train, load_dataset(spec, seed=2).x_train
        )
    assert not np.array_equal(
        load_dataset("synthetic:8:2:24", seed=1).x_train,
        load_dataset("synthetic:8:2:24", seed=2).x_train,
    )


def test_bad_synthetic_spec_is_rejected_without_generating_data() -> None:
    with pytest.raises(DatasetError, match="CLASSES"):
        parse_dataset_spec("synthetic:10:1:100")
