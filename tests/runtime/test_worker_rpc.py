"""Calls into a run's resident object go through its table of handlers, by name: an unknown
method is refused naming the ones there are, and nothing outside the table can be reached."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from workbench.parallel.parameter_server.shard_service import ParameterShard, call_shard
from workbench.runtime.worker_service import SERVICE_NAME, DeviceService, UnknownRpcMethod


class Target:
    """A resident object answering ``pull``, with another coroutine that is not for callers."""

    def __init__(self) -> None:
        self.wiped = False

    async def handle_pull(self, step: int) -> dict[str, Any]:
        return {"step": step}

    async def handle__wipe(self) -> None:
        self.wiped = True

    def rpc_handlers(self) -> dict[str, Any]:
        return {"pull": self.handle_pull}


def _service(target: object) -> DeviceService:
    service = DeviceService()
    service.runs = {"run-1": target}
    service.worker = SimpleNamespace(address="tls://10.0.0.1:4000")
    return service


def test_an_unknown_method_is_refused_naming_it_and_the_methods_there_are():
    service = _service(Target())
    assert asyncio.run(service._call("run-1", "pull", {"step": 4})) == {"step": 4}
    with pytest.raises(UnknownRpcMethod, match=r"Target has no method 'push'; it answers pull"):
        asyncio.run(service._call("run-1", "push", {}))


def test_a_coroutine_outside_the_table_cannot_be_reached():
    target = Target()
    with pytest.raises(UnknownRpcMethod, match="'_wipe'"):
        asyncio.run(_service(target)._call("run-1", "_wipe", {}))
    assert not target.wiped


def test_run_state_without_a_table_answers_no_calls():
    class Replica:  # a device program's state: it answers no RPCs
        async def handle_pull(self) -> None:
            raise AssertionError("reached")

    with pytest.raises(UnknownRpcMethod, match="Replica answers no calls"):
        asyncio.run(_service(Replica())._call("run-1", "pull", {}))


def test_a_parameter_shard_answers_the_clients_four_methods_and_nothing_else():
    # Pulls and pushes are the workers' messages (envelopes.py), not calls.
    shard = ParameterShard.__new__(ParameterShard)  # the table needs none of its state
    handlers = shard.rpc_handlers()
    assert sorted(handlers) == ["drain", "forget", "rejoin", "stop"]
    assert all(handler == getattr(shard, f"handle_{name}") for name, handler in handlers.items())
    worker = SimpleNamespace(
        address="tls://10.0.0.2:4000",
        plugins={SERVICE_NAME: SimpleNamespace(runs={"run-1": shard})},
    )
    with pytest.raises(UnknownRpcMethod, match="it answers drain, forget, rejoin, stop"):
        asyncio.run(call_shard("run-1", "snapshot", dask_worker=worker))
