"""The PyTorch peer: the same MLP step written the way PyTorch's own examples write it.

``nn.Sequential`` of ``nn.Linear``/``nn.ReLU``, ``F.cross_entropy``, ``torch.optim.SGD`` and
``zero_grad(set_to_none=True)``: idiomatic eager PyTorch, no compilation. PyTorch is an optional
extra (``pip install 'dtrain-workbench[bench]'``), so it is imported only when asked for.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np

TORCH_MISSING = "not installed (pip install 'dtrain-workbench[bench]')"


def import_torch() -> ModuleType | None:
    """``torch``, or None when it is not installed (the benchmark then reports the row)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


class TorchMLP:
    """The reference MLP in eager PyTorch, started from workbench-named parameters.

    Parameters
    ----------
    parameters
        ``dense_{i}/kernel`` (in, out) and ``dense_{i}/bias``, as NumPy arrays.
    learning_rate
        SGD step size.
    device
        ``"cpu"`` or ``"cuda"``.
    torch
        The imported module (see :func:`import_torch`).

    Examples
    --------
    >>> import numpy as np
    >>> torch = import_torch()
    >>> params = {"dense_0/kernel": np.ones((3, 2), np.float32) / 10,
    ...           "dense_0/bias": np.zeros(2, np.float32)}
    >>> model = TorchMLP(params, 0.1, "cpu", torch)
    >>> x, y = model.batch(np.ones((4, 3), np.float32), np.array([0, 1, 1, 0]))
    >>> round(float(model.step(x, y)), 4)
    0.6931
    """

    def __init__(
        self,
        parameters: Mapping[str, np.ndarray],
        learning_rate: float,
        device: str,
        torch: ModuleType,
    ) -> None:
        self.torch, self.device = torch, device
        depth = len(parameters) // 2
        layers: list[Any] = []
        for index in range(depth):
            kernel = parameters[f"dense_{index}/kernel"]
            linear = torch.nn.Linear(*kernel.shape, device=device, dtype=_dtype(torch, kernel))
            with torch.no_grad():
                # nn.Linear keeps its weight as (out, in): the transpose of our kernel.
                linear.weight.copy_(torch.from_numpy(np.ascontiguousarray(kernel.T)))
                linear.bias.copy_(torch.from_numpy(parameters[f"dense_{index}/bias"]))
            layers.append(linear)
            if index < depth - 1:
                layers.append(torch.nn.ReLU())
        self.model = torch.nn.Sequential(*layers)
        self.linears = [layer for layer in layers if isinstance(layer, torch.nn.Linear)]
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=learning_rate)

    def batch(self, x: np.ndarray, y: np.ndarray):
        """Tensors on this model's device for a host batch."""
        return (
            self.torch.from_numpy(np.ascontiguousarray(x)).to(self.device),
            self.torch.from_numpy(np.asarray(y, dtype=np.int64)).to(self.device),
        )

    def step(self, x, y):
        """One forward/backward/update; returns the loss tensor (reading it synchronises)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.torch.nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def synchronize(self) -> None:
        if self.device != "cpu":
            self.torch.cuda.synchronize()

    def parameters(self) -> dict[str, np.ndarray]:
        """Host copies under the workbench's names and layouts."""
        named = {}
        for index, linear in enumerate(self.linears):
            named[f"dense_{index}/kernel"] = linear.weight.detach().cpu().numpy().T.copy()
            named[f"dense_{index}/bias"] = linear.bias.detach().cpu().numpy().copy()
        return named


def _dtype(torch: ModuleType, array: np.ndarray):
    return torch.float64 if array.dtype == np.float64 else torch.float32


def unavailable_reason(device: str) -> str | None:
    """Why the PyTorch contender cannot run on ``device`` (``cpu``/``cuda``), or None.

    Asks without importing torch where it can: when every contender runs in its own process,
    the coordinating process need not load torch for a yes/no question.
    """
    if importlib.util.find_spec("torch") is None:
        return TORCH_MISSING
    torch = import_torch() if device == "cuda" else None
    if torch is not None and not torch.cuda.is_available():
        return "this PyTorch build cannot use CUDA (install a CUDA build of torch)"
    return None
