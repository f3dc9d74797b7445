"""The base of every ``tf.distribute``-style strategy class: options, ``scope()``, ``fit``,
and the custom-training-loop surface (``num_replicas_in_sync``, ``run``, ``reduce``,
``experimental_distribute_dataset``, ``gather_variables``, ``close``).

A custom loop needs a model compiled under the strategy (``model.compile(**fit_options)``,
checked as ``fit`` checks them). The first ``run`` (or scheduled closure) starts the loop: a
cluster set up as ``fit``'s would be (:mod:`workbench.distribute.loops`), kept until
``close()`` or the end of a ``with strategy:`` block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from workbench.config import ConfigError, RunConfig
from workbench.data import DatasetError, fit_arrays_dataset
from workbench.distribute.datasets import DistributedDataset
from workbench.distribute.device_lists import resolve_device_list
from workbench.distribute.loops import ClusterLoop, LocalLoop, LoopBroken
from workbench.distribute.runs import start
from workbench.distribute.values import (
    PerReplica,
    local_results,
    per_replica_arguments,
    reduce_values,
)
from workbench.events import EventLog
from workbench.launch.runner import PreparedRun, prepare_run
from workbench.models.strategy_scope import strategy_scope
from workbench.parallel.custom_loops import ClosureWorkerContext, MirroredReplicaContext
from workbench.parallel.data_parallel.replica import setup_replica
from workbench.parallel.parameter_server.worker_loop import setup_ps_worker
from workbench.strategies import STRATEGIES, ClusterStrategy, StrategyDefinition, validate_config
from workbench.strategies.data_parallel import DataParallel
from workbench.strategies.parameter_server import ParameterServer
from workbench.strategies.sharded import Sharded

# Which replica context lends each device program to step functions (by its setup task).
REPLICA_CONTEXTS: dict[Callable, type] = {
    setup_replica: MirroredReplicaContext,
    setup_ps_worker: ClosureWorkerContext,
}
# fit's options that a custom loop cannot honour: the loop, not the workbench, decides when
# a step ends (save a checkpoint with workbench.save_checkpoint and gather_variables).
NOT_IN_CUSTOM_LOOPS = ("save", "resume", "checkpoint_every")


class Strategy:
    """A parallel strategy and its options; subclasses are made per registered strategy
    (``strategy`` is the ``--strategy`` name, ``options`` the keywords it takes).

    ``devices`` is a count or a list of device names (``["/task:0", "/task:1"]``): the list's
    length is the count and replica r runs on its r-th name, which must be ``task:r``
    (:mod:`workbench.distribute.device_lists`).
    """

    strategy = "one-device"
    options: tuple[str, ...] = ()

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            allowed = ", ".join(self.options) or "none"
            raise ConfigError(
                unknown[0], f"is not an option of {type(self).__name__} (options: {allowed})"
            )
        self.device_list: tuple[str, ...] | None = None
        devices = options.get("devices")
        if isinstance(devices, list | tuple):
            count, device_type = resolve_device_list(
                self.definition, type(self).__name__, devices, options
            )
            self.device_list = tuple(devices)
            options["devices"] = count
            if device_type is not None and options.get("device_type", "auto") == "auto":
                options["device_type"] = device_type  # "/device:GPU:0" names say gpu
        self.settings = {"strategy": self.strategy, **options}
        self._reset_loop()

    def _reset_loop(self) -> None:
        self.log = EventLog()  # what the custom loop's devices did
        self._compiled: PreparedRun | None = None
        self._loop: ClusterLoop | LocalLoop | None = None
        self._closed = False
        self._broken: BaseException | None = None
        self._final: tuple[dict, dict] | None = None  # the variables when the loop closed

    # Only the options travel: a model built in scope carries its strategy to the devices.
    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "device_list": self.device_list}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.settings, self.device_list = state["settings"], state["device_list"]
        self._reset_loop()

    @property
    def definition(self) -> StrategyDefinition:
        return STRATEGIES[self.strategy]

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """Models built inside train with this strategy when their ``fit`` is called."""
        return strategy_scope(self)

    def config(self, **fit_options: Any) -> RunConfig:
        """The run this strategy and ``fit_options`` describe (checked)."""
        fields = set(RunConfig().to_dict()) - {"strategy", "json"}
        for name in fit_options:
            if name not in fields:
                allowed = ", ".join(sorted(fields))
                raise ConfigError(name, f"is not a fit option (options: {allowed})")
            if name in self.settings:
                raise ConfigError(name, f"is set by {type(self).__name__}; give it there only")
        options = {**self.settings, **fit_options}
        if "hidden" in options:
            options["hidden"] = tuple(options["hidden"])
        return validate_config(RunConfig(**options))

    def fit(
        self,
        model=None,
        x: Any = None,
        y: Any = None,
        validation_data: Any = None,
        background: bool = False,
        **fit_options: Any,
    ):
        """Train ``model`` (a ``Sequential``; None: the ``model`` preset option) on the
        ``dataset`` option, or on NumPy arrays ``x`` and ``y`` (evaluated on
        ``validation_data=(x_val, y_val)``; without it, on the last fifth of the rows, held
        out). Returns the :class:`~workbench.launch.runner.RunResult`, or with
        ``background=True`` a :class:`~workbench.launch.background_run.BackgroundRun` at once.
        """
        if x is None and y is None and validation_data is None:
            return start(self.config(**fit_options), model, background=background)
        if "dataset" in fit_options:
            raise ConfigError("dataset", "give either dataset= or the arrays x= and y=, not both")
        try:
            dataset = fit_arrays_dataset(x, y, validation_data)
        except DatasetError as error:
            raise ConfigError("fit", str(error).removeprefix("fit: ")) from None
        config = self.config(dataset=dataset.name, **fit_options)
        return start(config, model, background=background, dataset=dataset)

    # --- custom training loops ------------------------------------------------------------------

    @property
    def num_replicas_in_sync(self) -> int:
        """Replicas that compute gradients on slices of each global batch: the devices of
        data parallelism and the workers of a parameter server; ``devices / stages`` for a
        hybrid mesh; 1 where one model copy spans the devices (one-device, pipeline,
        model-parallel)."""
        definition, devices = self.definition, int(self.settings.get("devices", 1))
        if isinstance(definition, DataParallel | ParameterServer):
            return devices
        stages = next((o for o in definition.options if o.name == "stages"), None)
        if stages is not None:
            return max(1, devices // int(self.settings.get("stages", stages.default)))
        return 1

    def compile_model(self, model: Any, options: dict[str, Any]) -> None:
        """Bind ``model`` and ``fit``'s ``options`` to this strategy's custom loop (what
        ``model.compile`` does); checked now, started by the first ``run``."""
        if self._loop is not None:
            raise ConfigError(
                "compile",
                f"{type(self).__name__}'s custom loop is running; close() it before compiling",
            )
        for name in NOT_IN_CUSTOM_LOOPS:
            if name in options:
                raise ConfigError(
                    name,
                    "is fit's; a custom loop decides its own steps (gather_variables() and "
                    "workbench.save_checkpoint save them)",
                )
        if "tensorboard" in options:
            raise ConfigError(
                "tensorboard",
                "is fit's; a custom loop's steps are its own (write their scalars from the loop, "
                "e.g. with tensorboardX's SummaryWriter)",
            )
        self._compiled = prepare_run(self.config(**options), model)
        self._closed, self._broken, self._final = False, None, None

    def run(self, fn: Callable, args: tuple = (), kwargs: dict | None = None) -> PerReplica:
        """Call ``fn(*args, **kwargs)`` once per replica, on that replica's device (its Dask
        worker), in its replica context: a :class:`PerReplica` argument gives replica r its
        r-th value. Returns the replicas' return values as a :class:`PerReplica`.

        Inside ``fn``, ``model.compute_gradients(x, y)`` and
        ``model.optimizer_apply(gradients)`` train the compiled model; an update is the mean
        of the replicas' gradients, combined as ``fit`` combines them.

        Examples
        --------
        One device runs the step function in this process (a cluster strategy on its workers):

        >>> import workbench
        >>> model = workbench.Sequential([workbench.Flatten(), workbench.Dense(10)],
        ...                              input_shape=(1, 8, 8))
        >>> model.compile(steps=3, batch_size=32, dtype="float64", optimizer="sgd", lr=0.5)
        >>> strategy = model.strategy
        >>> batches = strategy.experimental_distribute_dataset("digits", global_batch_size=32)
        >>> def step_fn(inputs):
        ...     loss, gradients = model.compute_gradients(*inputs)
        ...     model.optimizer_apply(gradients)
        ...     return loss
        >>> losses = [strategy.run(step_fn, args=(batch,)) for _, batch in zip(range(3), batches)]
        >>> float(strategy.reduce("MEAN", losses[-1])) < float(strategy.reduce("MEAN", losses[0]))
        True
        """
        self._check_runs_step_functions()
        arguments = per_replica_arguments(args, kwargs or {}, self.num_replicas_in_sync)
        loop = self._running_loop("strategy.run")
        try:
            return PerReplica(tuple(loop.run(fn, arguments)))
        except LoopBroken as error:
            self._broken = error
            self.close()
            raise

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        """``value``'s replicas combined on the client: ``"SUM"`` or ``"MEAN"``
        (:class:`ReduceOp`), across replicas (``axis=None``) or also along ``axis``."""
        return reduce_values(reduce_op, value, axis, self.num_replicas_in_sync)

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        """The replicas' values of ``value`` as a tuple (a plain value: a 1-tuple)."""
        return local_results(value)

    def experimental_distribute_dataset(
        self,
        dataset: Any,
        global_batch_size: int,
        seed: int | None = None,
        epochs: int | None = None,
    ) -> DistributedDataset:
        """``dataset`` (a data set name, a ``Dataset`` or ``(x, y)`` arrays) in ``fit``'s
        global batches, each split over the replicas (:class:`DistributedDataset`); ``seed``
        orders the batches (default: the compiled model's seed, else 0)."""
        if seed is None:
            seed = self._compiled.config.seed if self._compiled is not None else 0
        replicas = self.num_replicas_in_sync
        return DistributedDataset(dataset, global_batch_size, replicas, seed, epochs)

    def gather_variables(self, optimizer_state: bool = False) -> dict[str, Any]:
        """The compiled model's variables on the host, by name, as the loop left them (with
        ``optimizer_state``, its optimizer slots too); the initial ones before the first step."""
        if self._final is not None:
            parameters, slots = self._final
        elif self._loop is not None:
            parameters, slots = self._loop.gather()
        else:
            job = self._prepared("gather_variables").job
            parameters = job.initial_parameters or job.model.init_parameters(
                job.config.seed, job.config.dtype
            )
            slots = job.initial_optimizer_state or {}
        return {**parameters, **slots} if optimizer_state else dict(parameters)

    def close(self) -> None:
        """End the custom loop: keep its variables (``gather_variables`` still answers), drop
        the devices' state and close the cluster it started. Closing twice is harmless."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        self._closed = True
        try:
            if self._broken is None:
                self._final = loop.gather()
        finally:
            loop.close()

    def __enter__(self) -> Strategy:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _prepared(self, what: str) -> PreparedRun:
        if self._compiled is None:
            raise RuntimeError(
                f"{what} needs a model compiled under {type(self).__name__}: build it in "
                "strategy.scope() and call model.compile(...) with fit's options"
            )
        return self._compiled

    def _check_runs_step_functions(self) -> None:
        definition = self.definition
        if isinstance(definition, ParameterServer):
            raise ConfigError(
                "strategy",
                f"{type(self).__name__}.run: a parameter server's workers run closures; "
                "schedule them with workbench.ClusterCoordinator(strategy).schedule(fn, args=...)",
            )
        if self.settings.get("replication") == "in-graph":
            raise ConfigError(
                "replication",
                f"{type(self).__name__}.run calls the step function on every replica, each "
                "with its own replica graph: use replication='between-graph' (in-graph builds "
                "the one client graph fit runs)",
            )
        # A sharded replica keeps parameter shards, which step functions cannot be lent.
        if isinstance(definition, ClusterStrategy) and (
            not isinstance(definition, DataParallel) or isinstance(definition, Sharded)
        ):
            raise ConfigError(
                "strategy",
                f"{type(self).__name__}.run: custom training loops run on one device, on "
                "data-parallel strategies (mirrored, central-storage, multi-worker-mirrored) "
                f"and, through ClusterCoordinator, on a parameter server; {definition.name} "
                "trains with fit",
            )

    def _running_loop(self, what: str) -> ClusterLoop | LocalLoop:
        """The loop, started on first use."""
        if self._broken is not None:
            raise RuntimeError(
                f"{what}: this strategy's custom loop failed and was closed ({self._broken}); "
                "compile the model again to start over"
            )
        if self._closed:
            raise RuntimeError(
                f"{what}: {type(self).__name__} was closed; compile the model again to start "
                "a new loop"
            )
        prepared = self._prepared(what)
        if self._loop is None:
            definition = self.definition
            if isinstance(definition, ClusterStrategy):
                self._loop = ClusterLoop(definition, prepared, self.log, REPLICA_CONTEXTS)
            else:
                self._loop = LocalLoop(prepared, self.log)
        return self._loop

    def model_weights(self, model: Any) -> dict[str, Any]:
        """What ``model.get_weights()`` returns for a model compiled under this strategy."""
        if self._compiled is None or self._compiled.job.model is not model:
            raise RuntimeError(
                "get_weights: the model's variables live with its custom loop; call "
                "model.compile(...) first (fit returns its variables in its result)"
            )
        return self.gather_variables()

    def __repr__(self) -> str:
        options = {k: v for k, v in self.settings.items() if k != "strategy"}
        if self.device_list is not None:
            options["devices"] = list(self.device_list)
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in options.items())})"
