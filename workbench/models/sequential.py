"""``Sequential``: a stack of layers that builds its parameters and its forward graph."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.ir import Tensor
from workbench.models.layers import ApplyContext, Dropout, Layer, ModelError
from workbench.models.strategy_scope import (
    compile_model,
    current_replica_context,
    current_strategy,
    fit_model,
    model_weights,
)


class Sequential:
    """Layers applied in order; the last one produces the logits.

    Examples
    --------
    >>> from workbench.models import Dense, Sequential
    >>> model = Sequential([Dense(8, activation="relu"), Dense(3)], input_shape=(4,))
    >>> params = model.init_parameters(seed=0, dtype="float64")
    >>> sorted(params)
    ['dense_0/bias', 'dense_0/kernel', 'dense_1/bias', 'dense_1/kernel']
    """

    def __init__(self, layers: Sequence[Layer], input_shape: Sequence[int], name: str = "model"):
        if not layers:
            raise ModelError("a Sequential model needs at least one layer")
        self.layers = list(layers)
        self.input_shape = tuple(int(s) for s in input_shape)
        self.name = name
        self.strategy = current_strategy()  # built inside ``strategy.scope()``: fit uses it
        counts: dict[str, int] = {}
        for layer in self.layers:
            layer.name = f"{layer.kind}_{counts.get(layer.kind, 0)}"
            counts[layer.kind] = counts.get(layer.kind, 0) + 1
        # Shapes are checked now, so a bad model fails before any data or cluster work.
        self._shapes, self._init = self._build(np.random.default_rng(0), record=True)

    @property
    def takes_integer_input(self) -> bool:
        return getattr(self.layers[0], "takes_integer_input", False)

    @property
    def uses_dropout(self) -> bool:
        return any(isinstance(layer, Dropout) and layer.rate > 0 for layer in self.layers)

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self._shapes[-1]

    def _build(self, rng: np.random.Generator, record: bool = False):
        shapes, params = [self.input_shape], {}
        for layer in self.layers:
            layer_params, shape = layer.build(shapes[-1], rng)
            for key, value in layer_params.items():
                params[f"{layer.name}/{key}"] = value
            shapes.append(tuple(shape))
        return shapes, params

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(value.shape) for name, value in self._init.items()}

    def init_parameters(self, seed: int, dtype: str) -> dict[str, np.ndarray]:
        """Fresh parameters: initialised in float64 from ``seed``, then cast to ``dtype``."""
        _, params = self._build(np.random.default_rng(seed))
        return {name: np.ascontiguousarray(value.astype(dtype)) for name, value in params.items()}

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Per-example shapes between layers: ``shapes[i]`` is layer i's input."""
        return list(self._shapes)

    def parameter_names(self, layers: range) -> list[str]:
        prefixes = tuple(self.layers[i].name + "/" for i in layers)
        return [name for name in self._init if name.startswith(prefixes)]

    def apply(
        self,
        x: Tensor,
        params: dict[str, Tensor],
        context: ApplyContext,
        layers: range | None = None,
    ) -> Tensor:
        """Run the layers (all, or the index range ``layers`` — one pipeline stage)."""
        for index in layers if layers is not None else range(len(self.layers)):
            layer = self.layers[index]
            prefix = layer.name + "/"
            own = {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}
            with x.builder.scope(layer.name):
                x = layer.apply(x, own, context)
        return x

    def fit(
        self,
        x: Any = None,
        y: Any = None,
        validation_data: Any = None,
        background: bool = False,
        **options,
    ):
        """Train this model with the strategy it was built under (one device if none), as
        ``tf.keras`` does under ``tf.distribute``: on NumPy arrays ``x`` (one row per sample)
        and ``y`` (integer class labels), evaluated on ``validation_data=(x_val, y_val)``
        (without it, on the last fifth of the rows, held out), or on a named data set
        (``dataset=``). ``options`` are ``dtrain run``'s flags as keywords (``epochs``,
        ``batch_size``, ``lr``, ...). uint8 inputs are read as ``byte / 255``, as the bundled
        image sets are; on a cluster the arrays are sent once per host. Returns the run's
        result, or with ``background=True`` its live handle."""
        if x is not None or y is not None or validation_data is not None:
            options.update(x=x, y=y, validation_data=validation_data)
        return fit_model(self.strategy, self, background, **options)

    # --- custom training loops (tf.distribute's strategy.run) ------------------------------

    def compile(self, **options: Any) -> None:
        """Fix how a custom training loop trains this model: ``fit``'s options as keywords
        (``optimizer``, ``lr``, ``dtype``, ``seed``, ``batch_size``, ``steps`` or ``epochs``,
        the learning-rate schedule, ...), checked now as ``fit`` checks them. The model's
        strategy (one device if it was built outside any ``scope()``) then trains it with
        ``strategy.run(step_fn, ...)``; the schedule and the dropout masks follow the
        optimizer's step count, so a loop over the same batches repeats ``fit``'s arithmetic.

        Examples
        --------
        >>> import workbench
        >>> model = workbench.Sequential([workbench.Flatten(), workbench.Dense(10)],
        ...                              input_shape=(1, 8, 8))
        >>> model.compile(optimizer="sgd", lr=0.1, dtype="float64", steps=5)
        >>> type(model.strategy).__name__
        'OneDeviceStrategy'
        """
        self.strategy = compile_model(self.strategy, self, options)

    def compute_gradients(self, x: Any, y: Any) -> tuple[float, dict[str, Any]]:
        """Inside ``strategy.run``'s step function: the loss and the gradients (by parameter
        name, on this replica's device) of this replica's rows ``x``, ``y``, at the variables
        the replica holds now."""
        return _replica_context("compute_gradients").compute_gradients(self, x, y)

    def optimizer_apply(self, gradients: dict[str, Any]) -> Any:
        """Inside ``strategy.run``'s step function: combine ``gradients`` across the replicas
        as the strategy does (the mean over replicas: all-reduced for mirrored, reduced on the
        storage device for central storage, pushed to the shards for a parameter server) and
        apply one optimizer step."""
        return _replica_context("optimizer_apply").optimizer_apply(self, gradients)

    def get_weights(self) -> dict[str, np.ndarray]:
        """The variables by name, on the host: as the compiled strategy's custom loop left
        them (gathered from its devices), or the initial ones before its first step."""
        return model_weights(self.strategy, self)

    def summary(self) -> str:
        lines = [f"{self.name}: input {self.input_shape}"]
        for layer, shape in zip(self.layers, self._shapes[1:]):
            count = sum(
                int(np.prod(v.shape))
                for k, v in self._init.items()
                if k.startswith(layer.name + "/")
            )
            lines.append(f"  {layer.name:<16} -> {shape!s:<16} {count:>9,} params")
        total = sum(int(np.prod(v.shape)) for v in self._init.values())
        lines.append(f"  total {total:,} parameters")
        return "\n".join(lines)


def _replica_context(method: str) -> Any:
    context = current_replica_context()
    if context is None:
        raise RuntimeError(
            f"model.{method} runs inside a step function given to strategy.run(step_fn, "
            "args=...) or ClusterCoordinator.schedule(fn, args=...): the replica's device "
            "holds the variables there"
        )
    return context
