"""The hand-written peer: the MLP step an expert writes directly against NumPy (or CuPy).

No graph, no interpreter, no framework: ``x @ W + b``, ``maximum``, a stable softmax, the
backward pass by hand and in-place SGD. It is the yardstick for the workbench's own overhead,
so it is written to be fast but plain, the way a careful person writes it in an afternoon.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from workbench.runtime import to_host


class HandWrittenMLP:
    """A ReLU MLP trained with softmax cross-entropy (mean over the batch) and plain SGD.

    Parameters
    ----------
    parameters
        Workbench-named arrays, ``dense_{i}/kernel`` of shape (in, out) and ``dense_{i}/bias``;
        copied, never aliased.
    learning_rate
        SGD step size.
    xp
        The array module, ``numpy`` or ``cupy``; batches must belong to it.

    Examples
    --------
    >>> import numpy as np
    >>> params = {"dense_0/kernel": np.ones((3, 2), np.float32) / 10,
    ...           "dense_0/bias": np.zeros(2, np.float32)}
    >>> model = HandWrittenMLP(params, learning_rate=0.1)
    >>> loss = model.step(np.ones((4, 3), np.float32), np.array([0, 1, 1, 0]))
    >>> round(float(loss), 4)
    0.6931
    """

    def __init__(self, parameters: Mapping[str, Any], learning_rate: float, xp: Any = np) -> None:
        self.xp, self.learning_rate = xp, learning_rate
        depth = len(parameters) // 2
        self.kernels = [xp.array(parameters[f"dense_{i}/kernel"], copy=True) for i in range(depth)]
        self.biases = [xp.array(parameters[f"dense_{i}/bias"], copy=True) for i in range(depth)]

    def step(self, x, y):
        """One forward/backward/update on batch ``x`` (N, in), ``y`` (N,) integer labels;
        returns the loss before the update as a device scalar (reading it would synchronise)."""
        xp, last = self.xp, len(self.kernels) - 1
        # Forward, keeping every layer's input: the backward pass needs them for dW and for
        # the ReLU masks (a post-ReLU activation is positive exactly where its pre-activation is).
        activations = [x]
        for index, (kernel, bias) in enumerate(zip(self.kernels, self.biases)):
            z = activations[-1] @ kernel
            z += bias
            if index < last:
                xp.maximum(z, 0, out=z)
            activations.append(z)
        logits = activations.pop()

        # Stable softmax: shifting by the row maximum keeps exp() from overflowing.
        logits -= logits.max(axis=1, keepdims=True)
        probabilities = xp.exp(logits)
        totals = probabilities.sum(axis=1, keepdims=True)
        rows = xp.arange(len(y))
        loss = (xp.log(totals[:, 0]) - logits[rows, y]).mean()

        # d(mean cross-entropy)/d(logits) = (softmax - one_hot) / N, built in place.
        probabilities /= totals
        probabilities[rows, y] -= 1
        probabilities /= len(y)
        grad = probabilities

        for index in range(last, -1, -1):
            layer_input = activations[index]
            kernel_grad = layer_input.T @ grad
            bias_grad = grad.sum(axis=0)
            if index > 0:
                # Propagate through the old kernel before it is updated.
                grad = grad @ self.kernels[index].T
                grad *= layer_input > 0
            self.kernels[index] -= self.learning_rate * kernel_grad
            self.biases[index] -= self.learning_rate * bias_grad
        return loss

    def parameters(self) -> dict[str, np.ndarray]:
        """Host copies under the workbench's names."""
        named = {}
        for index, (kernel, bias) in enumerate(zip(self.kernels, self.biases)):
            named[f"dense_{index}/kernel"] = to_host(kernel).copy()
            named[f"dense_{index}/bias"] = to_host(bias).copy()
        return named
