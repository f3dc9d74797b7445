"""The shard state machine, driven directly: no Dask, no threads."""

import random

import pytest

from workbench.parallel.parameter_server import (
    ApplyUpdate,
    IgnoreDuplicate,
    Pull,
    Push,
    SendParameters,
    ShardProtocol,
)


def test_sync_applies_the_mean_once_every_worker_pushed():
    shard = ShardProtocol(workers=2, mode="sync")
    assert shard.handle(Pull(0, 0)) == [SendParameters(0, 0, 0)]
    assert shard.handle(Pull(1, 0)) == [SendParameters(1, 0, 0)]
    assert shard.handle(Pull(0, 1)) == []  # step 1 needs the step-0 update first
    assert shard.handle(Push(1, 0, 0, "g1")) == []
    out = shard.handle(Push(0, 0, 0, "g0"))
    assert out == [ApplyUpdate(("g0", "g1"), 0, (0, 0), (0, 1)), SendParameters(0, 1, 1)]
    assert shard.version == 1


def test_duplicate_pushes_are_never_applied_twice():
    shard = ShardProtocol(workers=1, mode="async")
    shard.handle(Pull(0, 0))
    first = shard.handle(Push(0, 0, 0, "g"))
    assert isinstance(first[0], ApplyUpdate)
    assert shard.handle(Push(0, 0, 0, "g")) == [IgnoreDuplicate(0, 0)]
    assert shard.version == 1
    sync = ShardProtocol(workers=2, mode="sync")
    sync.handle(Push(0, 0, 0, "a"))
    assert sync.handle(Push(0, 0, 0, "a")) == [IgnoreDuplicate(0, 0)]
    assert sync.version == 0


def test_async_without_bound_never_holds_a_pull():
    shard = ShardProtocol(workers=3, mode="async")
    for worker in range(3):
        assert shard.handle(Pull(worker, 0)) == [SendParameters(worker, 0, 0)]
    out = shard.handle(Push(2, 0, 0, "g"))
    assert out[0].staleness == (0,)
    out = shard.handle(Push(0, 0, 0, "g"))
    assert out[0].staleness == (1,)


def test_staleness_zero_makes_workers_take_turns():
    shard = ShardProtocol(workers=2, mode="async", staleness_bound=0)
    assert shard.handle(Pull(0, 0)) == [SendParameters(0, 0, 0)]
    assert shard.handle(Pull(1, 0)) == []
    out = shard.handle(Push(0, 0, 0, "g"))
    assert out[-1] == SendParameters(1, 0, 1)
    assert shard.staleness_log == [0]


def simulate(workers, bound, steps, seed):
    """Random interleavings of pulls and pushes; returns the shard after every worker finished."""
    rng = random.Random(seed)
    shard = ShardProtocol(workers=workers, mode="async", staleness_bound=bound)
    holding: dict[int, int] = {}  # worker -> version read (granted, computing)
    asked: set[int] = set()
    step_of = dict.fromkeys(range(workers), 0)
    for worker in range(workers):
        asked.add(worker)
        for ins in shard.handle(Pull(worker, 0)):
            holding[ins.worker] = ins.version
            asked.discard(ins.worker)
    while any(step < steps for step in step_of.values()):
        assert holding, "deadlock: nobody holds a read and pulls are waiting"
        worker = rng.choice(sorted(holding))
        version = holding.pop(worker)
        instructions = shard.handle(Push(worker, step_of[worker], version, "g"))
        if rng.random() < 0.2:  # a retried delivery
            assert shard.handle(Push(worker, step_of[worker], version, "g")) == [
                IgnoreDuplicate(worker, step_of[worker])
            ]
        step_of[worker] += 1
        if step_of[worker] < steps:
            asked.add(worker)
            instructions += shard.handle(Pull(worker, step_of[worker]))
        for ins in instructions:
            if isinstance(ins, SendParameters):
                holding[ins.worker] = ins.version
                asked.discard(ins.worker)
    assert not asked
    return shard


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
@pytest.mark.parametrize("bound", [0, 1, 2, 4, 8])
@pytest.mark.parametrize("seed", range(5))
def test_bounded_staleness_holds_and_never_deadlocks(workers, bound, seed):
    shard = simulate(workers, bound, steps=12, seed=seed)
    assert len(shard.staleness_log) == workers * 12  # every step applied exactly once
    assert max(shard.staleness_log) <= bound


def test_unbounded_async_does_get_stale():
    shard = simulate(workers=4, bound=None, steps=20, seed=1)
    assert max(shard.staleness_log) >= 3


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("seed", range(6))
def test_sync_random_interleavings_finish_in_lock_step(workers, seed):
    rng = random.Random(seed)
    shard = ShardProtocol(workers=workers, mode="sync")
    steps = 6
    holding: dict[int, int] = {}  # worker -> step it may compute
    todo = [Pull(worker, 0) for worker in range(workers)]
    rng.shuffle(todo)
    done = dict.fromkeys(range(workers), 0)
    while any(d < steps for d in done.values()):
        instructions = []
        if todo and (not holding or rng.random() < 0.5):
            instructions = shard.handle(todo.pop())
        else:
            assert holding, "deadlock: every worker is waiting for a pull"
            worker = rng.choice(sorted(holding))
            step = holding.pop(worker)
            instructions = shard.handle(Push(worker, step, step, f"g{worker}"))
            done[worker] += 1
            if done[worker] < steps:
                todo.insert(rng.randrange(len(todo) + 1), Pull(worker, step + 1))
        for ins in instructions:
            if isinstance(ins, SendParameters):
                assert ins.version == ins.step
                holding[ins.worker] = ins.step
    assert shard.version == steps
    assert shard.staleness_log == [0] * (workers * steps)
