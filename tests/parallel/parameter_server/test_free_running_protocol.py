"""The shard state machine for free-running workers: budgets, backups, forgetting, stopping."""

from workbench.parallel.parameter_server.protocol import (
    ApplyUpdate,
    DropPush,
    Forget,
    Pull,
    Push,
    SendParameters,
    ShardProtocol,
    Stop,
)


def test_backups_apply_the_first_pushes_and_drop_the_late_one():
    shard = ShardProtocol(workers=3, mode="sync", backups=1)
    for worker in range(3):
        shard.handle(Pull(worker, 0))
    assert shard.handle(Push(2, 0, 0, "g2")) == []
    applied = shard.handle(Push(0, 0, 0, "g0"))
    assert applied[0] == ApplyUpdate(("g0", "g2"), 0, (0, 0), (0, 2))
    assert shard.version == 1
    assert shard.handle(Push(1, 0, 0, "late")) == [DropPush(1, 0)]
    assert shard.dropped == 1 and shard.updates_by_worker == {0: 1, 2: 1}
    # The late worker asks for step 1 or newer and gets the newest at once.
    assert shard.handle(Pull(1, 1)) == [SendParameters(1, 1, 1)]


def test_a_spent_budget_answers_pulls_at_once_and_drops_pushes():
    shard = ShardProtocol(workers=2, mode="async", total_updates=2)
    shard.handle(Pull(0, 0))
    shard.handle(Pull(1, 0))
    shard.handle(Push(0, 0, 0, "a"))
    shard.handle(Push(1, 0, 0, "b"))
    assert shard.done
    assert shard.handle(Pull(0, 1)) == [SendParameters(0, 1, 2)]
    assert shard.handle(Push(0, 1, 2, "c")) == [DropPush(0, 1)]
    assert shard.version == 2


def test_a_forgotten_worker_no_longer_holds_back_a_bounded_pull():
    shard = ShardProtocol(workers=2, mode="async", staleness_bound=0)
    assert shard.handle(Pull(0, 0)) == [SendParameters(0, 0, 0)]
    assert shard.handle(Pull(1, 0)) == []  # bound 0: wait for worker 0's push
    assert shard.handle(Forget(0)) == [SendParameters(1, 0, 0)]


def test_stop_spends_the_budget():
    shard = ShardProtocol(workers=1, mode="sync", total_updates=100)
    shard.handle(Pull(0, 0))
    shard.handle(Stop())
    assert shard.done
    assert shard.handle(Pull(0, 5)) == [SendParameters(0, 5, 0)]
