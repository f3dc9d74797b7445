"""A mesh stage's tensor split without a cluster: the plan chunk by chunk, each rank's shard of
the variables and slots joined back whole, and the tensor group's all-reduces keyed apart when
a key repeats (every micro-batch runs the same graph)."""

import threading

import numpy as np

from workbench.models import mlp
from workbench.optim import init_slots, make_optimizer
from workbench.parallel.mesh import MeshShape
from workbench.parallel.pipeline.mesh_stage import (
    TensorCollectives,
    join_tensor_shards,
    shard_state,
    stage_plans,
)
from workbench.runtime.device_arrays import DeviceArrays
from workbench.runtime.transport import ThreadTransport


def test_a_chunk_without_a_dense_pair_stays_whole_and_the_others_split():
    model = mlp((64,), 10, (32, 16))  # dense_0 | dense_1, dense_2 in two stages
    plan = stage_plans(model, 2, 2)
    assert {name: split.role for name, split in plan.items()} == {
        "dense_0/kernel": "replicated",
        "dense_0/bias": "replicated",
        "dense_1/kernel": "column",
        "dense_1/bias": "column",
        "dense_2/kernel": "row",
        "dense_2/bias": "replicated",
    }


def test_the_shards_of_replica_zero_join_into_the_whole_variables_and_slots():
    model = mlp((64,), 10, (32, 16))
    mesh = MeshShape(dp=1, tp=2, pp=1)
    plan = stage_plans(model, mesh.tp, mesh.pp)
    parameters = model.init_parameters(0, "float64")
    slots = init_slots(make_optimizer("adam"), parameters)  # adam_t: a scalar, never split
    arrays = DeviceArrays.for_kind("cpu")
    shards = [shard_state({**parameters, **slots}, plan, t, mesh.tp, arrays) for t in range(2)]
    assert shards[1]["dense_0/kernel"].shape == (64, 16)
    assert shards[1]["dense_0/kernel/adam_m"].shape == (64, 16)
    assert shards[1]["dense_1/kernel"].shape == (16, 16)
    snapshots = [
        {
            "parameters": {n: v for n, v in shard.items() if n in parameters},
            "optimizer_state": {n: v for n, v in shard.items() if n in slots},
        }
        for shard in shards
    ]
    joined, joined_slots = join_tensor_shards(snapshots, mesh, plan)
    for whole, back in ((parameters, joined), (slots, joined_slots)):
        assert back.keys() == whole.keys()
        for name, value in whole.items():
            np.testing.assert_array_equal(back[name], value, err_msg=name)


class _Recording:
    """A transport that notes every message key it sends."""

    def __init__(self, inner: ThreadTransport) -> None:
        self.inner, self.keys = inner, []
        self.rank, self.size = inner.rank, inner.size

    bytes_sent = property(lambda self: self.inner.bytes_sent)
    bytes_received = property(lambda self: self.inner.bytes_received)

    def count_traffic(self, sent: int, received: int) -> None:
        self.inner.count_traffic(sent, received)

    def send(self, peer, key, array) -> None:
        self.keys.append(key)
        self.inner.send(peer, key, array)

    def recv(self, peer, key):
        return self.inner.recv(peer, key)


def test_a_repeated_collective_key_is_a_new_collective_each_time_and_each_step():
    transports = [_Recording(t) for t in ThreadTransport.group(2, timeout=10)]
    steps = [0, 0, 1]  # two micro-batches in step 0, one in step 1
    current = {0: 0, 1: 0}
    collectives = [
        TensorCollectives(transports[r], lambda r=r: current[r], lambda: 0.0) for r in range(2)
    ]
    results: dict[int, list] = {0: [], 1: []}

    def rank(r: int) -> None:
        for call, step in enumerate(steps):
            current[r] = step
            value = np.full(4, 10.0 * call + r)
            results[r].append(collectives[r].all_reduce("tp/dense_1/matmul/all_reduce", value))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for r in range(2):
        assert [float(total[0]) for total in results[r]] == [1.0, 21.0, 41.0]
        assert len(set(transports[r].keys)) == len(transports[r].keys)  # never reused
        assert len(collectives[r].take_calls()) == 3 and collectives[r].calls == []
