"""The replica context a step function runs in, on its replica's device.

A :class:`ReplicaContext` wraps the device program a strategy sets up for ``fit`` (a
data-parallel ``Replica``, a parameter-server worker) and lends it to the user's step function:
``model.compute_gradients(x, y)`` runs the program's gradient graph on this replica's rows, and
``model.optimizer_apply(gradients)`` hands the gradients to the strategy's way of combining and
applying them (subclasses). The optimizer's step count (``iterations``) is the step ``fit``
would be at: it picks the learning rate and the dropout masks, so a loop over ``fit``'s batches
repeats ``fit``'s arithmetic.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from workbench.events.records import Phase, PhaseEvent
from workbench.models.strategy_scope import replica_scope
from workbench.parallel.data_parallel.gradient_worker import GradientWorker
from workbench.runtime.device_arrays import DeviceArrays
from workbench.runtime.worker_service import device_service


class StepFunctionError(RuntimeError):
    """A step function or a scheduled closure raised on a device. The message names the
    device, the error and where in the function it was raised; ``device`` says the same, and
    ``iterations`` how many optimizer steps the replica had applied when it failed (None: an
    update failed half way, so the replica's state is unknown)."""

    def __init__(self, message: str, device: str, iterations: int | None = None) -> None:
        # Every argument goes to the base: the error is pickled to the client and rebuilt.
        super().__init__(message, device, iterations)
        self.message, self.device, self.iterations = message, device, iterations

    def __str__(self) -> str:
        return self.message


class ReplicaContext:
    """What a step function sees on its replica: ``replica_id_in_sync_group``,
    ``num_replicas_in_sync``, ``device``, and the gradient and update calls that
    ``Sequential.compute_gradients`` and ``Sequential.optimizer_apply`` make.

    Subclasses implement ``_apply(step, gradients)``: how the replicas' gradients are combined
    and applied. The context also serves as the device program of the run (``snapshot``,
    ``device``, ``arrays``, ``current_step``), so the engine's snapshot and cleanup tasks
    work on it unchanged.
    """

    def __init__(self, worker: GradientWorker, replica_id: int, num_replicas: int) -> None:
        self.worker = worker
        self.replica_id_in_sync_group = replica_id
        self.num_replicas_in_sync = num_replicas
        self.iterations = 0  # optimizer steps applied on this replica
        # An update that failed half way (a peer stalled mid all-reduce) leaves partial
        # messages and an unknown state behind: the replica reports no step count after it.
        self.interrupted = False
        self.events: list[PhaseEvent] = []  # this call's phases, handed back with its result
        config = worker.config
        self.rows = config.batch_size // worker.spec.replicas  # the gradient graph's batch
        self.global_batch_size = config.batch_size
        self.input_dtype = "int64" if worker.model.takes_integer_input else config.dtype
        self.shapes = worker.model.parameter_shapes()
        # What optimizer_apply takes: a gradient per parameter (a parameter server's workers
        # override it with the pieces they push).
        self.gradient_shapes: dict[str, tuple[int, ...]] = dict(self.shapes)

    # --- the device program's face (snapshot and cleanup tasks) ------------------------------

    @property
    def device(self) -> str:
        return self.worker.device

    @property
    def arrays(self) -> DeviceArrays:
        return self.worker.arrays

    @property
    def current_step(self) -> int:
        return self.step

    @property
    def step(self) -> int:
        """The step the next gradients and update belong to (``fit``'s step index)."""
        return self.iterations

    def snapshot(self) -> dict[str, dict[str, np.ndarray]]:
        return self.worker.snapshot()

    # --- what the step function calls ---------------------------------------------------------

    def compute_gradients(self, model: Any, x: Any, y: Any) -> tuple[float, dict[str, Any]]:
        """The loss and gradients of rows ``x``, ``y`` at this replica's current variables."""
        self._check_model(model, "compute_gradients")
        batch = (self._rows_of(x, "x").astype(self.input_dtype), self._rows_of(y, "y"))
        step, start = self.step, self.worker.clock()
        gradients, loss = self.worker.compute(step, fed=batch)
        self.events.append(PhaseEvent(self.device, Phase.COMPUTE, step, start, self.worker.clock()))
        return loss, gradients

    def optimizer_apply(self, model: Any, gradients: dict[str, Any]) -> Any:
        """Combine ``gradients`` across the replicas and apply one optimizer step."""
        self._check_model(model, "optimizer_apply")
        self._check_gradients(gradients)
        try:
            result = self._apply(self.step, gradients)
        except BaseException:
            self.interrupted = True
            raise
        self.iterations += 1
        return result

    def _apply(self, step: int, gradients: dict[str, Any]) -> Any:
        raise NotImplementedError

    def call(self, function: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
        """Run ``function(*args, **kwargs)`` in this replica's context: its return value, the
        phases it ran, and the optimizer steps applied so far."""
        self.events = []
        try:
            with replica_scope(self):
                value = function(*args, **kwargs)
        except Exception as error:
            # The user's frames only (not this one): where in the step function it failed.
            frames = traceback.extract_tb(error.__traceback__)[1:]
            where = "".join(traceback.format_list(frames))
            raise StepFunctionError(
                f"{self.device} (replica {self.replica_id_in_sync_group}): the step function "
                f"raised {type(error).__name__}: {error}\n{where}",
                self.device,
                None if self.interrupted else self.iterations,
            ) from None
        finally:
            self._after_call()
        iterations = None if self.interrupted else self.iterations
        return {"value": value, "events": self.events, "iterations": iterations}

    def _after_call(self) -> None:
        """What a call leaves to tidy up (a parameter-server read that was never pushed)."""

    # --- checks -----------------------------------------------------------------------------------

    def _check_model(self, model: Any, method: str) -> None:
        if model.parameter_shapes() != self.shapes:
            raise ValueError(
                f"model.{method}: this model's parameters "
                f"({', '.join(model.parameter_shapes())}) are not those of the model the "
                f"strategy compiled ({', '.join(self.shapes)}); call it on that model"
            )

    def _rows_of(self, array: Any, name: str) -> Any:
        if not hasattr(array, "astype"):
            array = np.asarray(array)
        rows = array.shape[0] if array.ndim else 0
        if rows != self.rows:
            raise ValueError(
                f"compute_gradients: {name} has {rows} rows, but this replica's share of the "
                f"global batch (batch_size {self.global_batch_size} over "
                f"{self.worker.spec.replicas} replicas) is {self.rows}; distribute the data "
                f"with global_batch_size={self.global_batch_size}"
            )
        return array

    def _check_gradients(self, gradients: dict[str, Any]) -> None:
        if not isinstance(gradients, dict):
            raise TypeError(
                "optimizer_apply: gradients must be the dict compute_gradients returned "
                f"(name -> array), got {type(gradients).__name__}"
            )
        expected = self.gradient_shapes
        missing = [name for name in expected if name not in gradients]
        unknown = [name for name in gradients if name not in expected]
        if missing or unknown:
            raise ValueError(
                f"optimizer_apply: gradients must have the entries compute_gradients returns; "
                f"missing {missing or 'none'}, unknown {unknown or 'none'}"
            )
        for name, shape in expected.items():
            if tuple(gradients[name].shape) != tuple(shape):
                raise ValueError(
                    f"optimizer_apply: the gradient {name} has shape "
                    f"{tuple(gradients[name].shape)}; it must be {tuple(shape)}"
                )


# --- task functions (run on the workers) --------------------------------------------------


def setup_custom_loop(run_id: str, setup: Callable, spec: Any, context: type | None) -> str:
    """Task: set up the strategy's device program as ``fit`` would (``setup(spec)``), then,
    when ``context`` is given, wrap it in that replica context for step functions."""
    name = setup(spec)
    if context is not None:
        runs = device_service().runs
        runs[run_id] = context(runs[run_id])
    return name


def run_step_function(run_id: str, function: Callable, args: tuple, kwargs: dict) -> dict:
    """Task: one call of a step function in this worker's replica context for ``run_id``."""
    return device_service().runs[run_id].call(function, args, kwargs)
