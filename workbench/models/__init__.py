"""Models: Keras-like layers and ``Sequential``, which emit IR, and the ``--model`` presets.

What flows in: layer definitions and an input shape. What flows out: named parameter arrays
(layer path -> array) and, given IR tensors for those parameters, the forward graph to logits.
"""

from workbench.models.layers import (
    Activation,
    ApplyContext,
    AvgPool2D,
    Conv2D,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    Layer,
    LayerNorm,
    MaxPool2D,
    ModelError,
    device,
)
from workbench.models.presets import MODEL_NAMES, build_model, cnn, mlp, transformer
from workbench.models.sequential import Sequential
from workbench.models.transformer import PositionEmbedding, Reshape, TokenMean, TransformerBlock

__all__ = [
    "MODEL_NAMES",
    "Activation",
    "ApplyContext",
    "AvgPool2D",
    "Conv2D",
    "Dense",
    "Dropout",
    "Embedding",
    "Flatten",
    "Layer",
    "LayerNorm",
    "MaxPool2D",
    "ModelError",
    "PositionEmbedding",
    "Reshape",
    "Sequential",
    "TokenMean",
    "TransformerBlock",
    "build_model",
    "cnn",
    "device",
    "mlp",
    "transformer",
]
