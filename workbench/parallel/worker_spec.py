"""What every device of a distributed run is given once, at setup: a :class:`WorkerSpec`.

The client builds one per device (:func:`make_worker_spec`), pickles it to the device's Dask
worker, and the device builds its part of the run from it: its rank among the replicas, its
peers' addresses, the model, the run's config (as a dict: it crosses processes) and, when
resuming, the checkpoint's variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workbench.config import RunConfig
from workbench.data import Dataset, ModelInputs
from workbench.optim import compute_copies, compute_dtype, init_slots, without_compute_copies
from workbench.parallel.straggler import SimulatedStraggler
from workbench.runtime.cluster import ClusterSession
from workbench.runtime.device_arrays import DeviceArrays
from workbench.runtime.host_dataset import worker_dataset
from workbench.training.job import RestorePoint, TrainingJob


@dataclass(frozen=True)
class WorkerSpec:
    """What a device needs to build its part of a run (pickled to its worker once)."""

    run_id: str
    config: dict
    rank: int
    replicas: int
    addresses: tuple[str, ...]
    device_names: tuple[str, ...]
    clock_origin: float
    total_steps: int
    device_type: str = "cpu"  # the run's, decided by the workers' reports
    model: Any = None  # the Sequential to train (built once by the client, pickled here)
    reads_own_data: bool = True  # between-graph; False: the client feeds batches (in-graph)
    initial_parameters: dict | None = None
    initial_optimizer_state: dict | None = None

    @property
    def run_config(self) -> RunConfig:
        return RunConfig.from_dict(self.config)

    @property
    def device(self) -> str:
        return self.device_names[self.rank]

    def straggler(self) -> SimulatedStraggler:
        """How much slower ``--simulate-straggler`` makes this device's compute."""
        return SimulatedStraggler.for_device(self.config, self.device)

    def device_arrays(self) -> DeviceArrays:
        """This device's array module, looked up in the worker process that runs it."""
        return DeviceArrays.for_kind(self.device_type, self.device)

    def dataset(self) -> Dataset:
        """The run's data set as its host holds it (staged by the client before setup)."""
        config = self.config
        return worker_dataset(self.run_id, config["dataset"], config["seed"])


def training_data(dataset: Dataset, model: Any, dtype: str, arrays: DeviceArrays) -> tuple:
    """(inputs, labels) of the training set on a device: the stored arrays (bytes for images;
    on a CPU the host's shared copy itself), each batch converted to the model's inputs as
    its rows are gathered."""
    input_dtype = "int64" if model.takes_integer_input else dtype
    inputs = ModelInputs(arrays.readable(dataset.x_train), dataset.input_scale, input_dtype)
    return inputs, arrays.readable(dataset.y_train)


def make_worker_spec(
    session: ClusterSession,
    job: TrainingJob,
    rank: int,
    replicas: int,
    restore: RestorePoint,
    reads_own_data: bool = True,
) -> WorkerSpec:
    """The spec of device ``rank`` of ``session`` for ``job``, one of ``replicas`` replicas,
    starting from ``restore``'s variables."""
    return WorkerSpec(
        run_id=session.run_id,
        config=job.config.to_dict(),
        rank=rank,
        replicas=replicas,
        addresses=tuple(session.addresses),
        device_names=tuple(session.device_names),
        clock_origin=job.clock_origin,
        total_steps=job.total_steps,
        device_type=session.device_type,
        model=job.model,
        reads_own_data=reads_own_data,
        initial_parameters=restore.parameters,
        initial_optimizer_state=restore.optimizer_state,
    )


def initial_state(spec: WorkerSpec, optimizer, device: DeviceArrays, names=None) -> dict[str, Any]:
    """Writable variables and optimizer slots for ``names`` (default: every parameter), on
    ``device``: the resumed checkpoint's if there is one, else freshly initialised from the
    run's seed. With ``--precision mixed-*`` the parameters are the float32 master weights and
    each has its 16-bit copy beside it (:mod:`workbench.optim.master_weights`)."""
    config = spec.run_config
    params = spec.initial_parameters or spec.model.init_parameters(config.seed, config.dtype)
    if names is not None:
        params = {name: params[name] for name in dict.fromkeys(names)}
    slots = init_slots(optimizer, params)
    if spec.initial_optimizer_state:
        slots = {name: spec.initial_optimizer_state[name] for name in slots}
    copies = compute_copies(params, compute_dtype(config.precision))
    state = {**params, **slots, **copies}
    return {name: device.to_device(value) for name, value in state.items()}


def host_snapshot(device: DeviceArrays, state: dict[str, Any], names) -> dict[str, dict]:
    """Host copies of a device's variables (``names``) and its other entries (optimizer
    slots): what the client gathers at the end of a run (not mixed precision's 16-bit copies,
    which the masters give again)."""
    names = set(names)
    kept = without_compute_copies(state)
    tensors = {n: v for n, v in kept.items() if not n.startswith("__")}  # not the rendezvous
    return {
        "parameters": {n: device.to_host(v) for n, v in tensors.items() if n in names},
        "optimizer_state": {n: device.to_host(v) for n, v in tensors.items() if n not in names},
    }
