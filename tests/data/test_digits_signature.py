"""The planner sizes models from the digits' signature without loading them: it must be what a
load gives."""

from workbench.data.catalog import dataset_signature, load_dataset


def test_the_digits_signature_is_what_loading_them_gives():
    dataset = load_dataset("digits")
    assert dataset_signature("digits") == (tuple(dataset.input_shape), dataset.num_classes)
