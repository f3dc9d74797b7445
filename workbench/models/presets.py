"""Named models for ``--model``: ``mlp`` (widths from ``--hidden``) and ``cnn`` (LeNet-style)."""

from __future__ import annotations

from collections.abc import Sequence

from workbench.models.layers import Conv2D, Dense, Flatten, Layer, LayerNorm, MaxPool2D, ModelError
from workbench.models.sequential import Sequential
from workbench.models.transformer import PositionEmbedding, Reshape, TokenMean, TransformerBlock

MODEL_NAMES = ("mlp", "cnn", "transformer")


def mlp(input_shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (512, 512)):
    """Flatten, then ``Dense(h, relu)`` per hidden size, then a linear classifier."""
    layers: list[Layer] = [Flatten()] if len(input_shape) > 1 else []
    layers += [Dense(units, activation="relu") for units in hidden]
    layers.append(Dense(num_classes))
    return Sequential(layers, input_shape, name="mlp")


def cnn(input_shape: Sequence[int], num_classes: int):
    """A LeNet-style network sized like the Keras MNIST example: conv(32, 3x3) - max-pool -
    conv(64, 3x3) - max-pool - dense(128) - classifier, ReLU throughout, 'same' convolutions.

    On small images (under 16 pixels a side, such as the 8x8 digits) the second pool is left
    out: it would leave 2x2 maps and discard most of what the second convolution found.
    """
    if len(input_shape) != 3:
        raise ModelError(
            f"model cnn needs image input (channels, height, width), got {input_shape}"
        )
    if min(input_shape[1:]) < 4:
        raise ModelError(f"model cnn needs images of at least 4x4 pixels, got {input_shape}")
    second_pool = [MaxPool2D(2)] if min(input_shape[1:]) >= 16 else []
    layers = [
        Conv2D(32, 3, padding="same", activation="relu"),
        MaxPool2D(2),
        Conv2D(64, 3, padding="same", activation="relu"),
        *second_pool,
        Flatten(),
        Dense(128, activation="relu"),
        Dense(num_classes),
    ]
    return Sequential(layers, input_shape, name="cnn")


def transformer(input_shape: Sequence[int], num_classes: int, width: int = 32, blocks: int = 2):
    """Reads an image as a sequence of rows (tokens): project each row to ``width``, add a
    learned position embedding, run pre-norm Transformer blocks, average the tokens, classify."""
    if len(input_shape) not in (2, 3):
        raise ModelError(f"model transformer needs (tokens, features) or images, got {input_shape}")
    channels_rows = (
        input_shape if len(input_shape) == 2 else (input_shape[1], input_shape[0] * input_shape[2])
    )
    layers = [
        Reshape(channels_rows) if len(input_shape) == 3 else None,
        Dense(width),
        PositionEmbedding(),
        *[TransformerBlock(heads=4) for _ in range(blocks)],
        LayerNorm(),
        TokenMean(),
        Dense(num_classes),
    ]
    return Sequential(
        [layer for layer in layers if layer is not None], input_shape, name="transformer"
    )


def build_model(
    name: str, input_shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (512, 512)
) -> Sequential:
    if name == "mlp":
        return mlp(input_shape, num_classes, hidden)
    if name == "cnn":
        return cnn(input_shape, num_classes)
    if name == "transformer":
        return transformer(input_shape, num_classes)
    raise ModelError(f"model {name!r} is not one of {', '.join(MODEL_NAMES)}")
