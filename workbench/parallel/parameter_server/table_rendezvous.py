"""The rendezvous of a partition whose peers are reached by pull and push RPCs.

A parameter-server worker's partition and a shard's programs run Send and Recv ops like any
partition, but the tensors cross in the pulls and pushes the sans-IO protocol schedules: the
recvs read what the last exchange brought, the sends are kept for the next one to carry.
"""

from __future__ import annotations

from typing import Any


class TableRendezvous:
    """The ``RENDEZVOUS`` of a program whose peers are reached by pull and push RPCs: recvs
    read what the last pull (or push) brought, sends are kept until the next push (or pull
    reply) carries them."""

    def __init__(self) -> None:
        self.received: dict[str, Any] = {}
        self.sent: dict[str, Any] = {}

    def send(self, target: str, key: str, value: Any) -> None:
        self.sent[key] = value

    def recv(self, source: str, key: str) -> Any:
        try:
            return self.received[key]
        except KeyError:
            raise RuntimeError(f"nothing from {source} under {key!r} in this exchange") from None
