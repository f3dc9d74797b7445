"""The messages our real collectives exchange, recorded on threads, and the ones a simulator
program describes, in the same form: (``send``, peer rank, key, bytes) and (``recv``, peer
rank, key), per rank, in the order each rank issues them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from workbench.runtime.transport import ThreadTransport
from workbench.simulate import Recv, Send


class RecordingTransport:
    """A rank's transport that logs each send and receive before passing it on."""

    def __init__(self, inner: ThreadTransport) -> None:
        self.inner, self.rank, self.size = inner, inner.rank, inner.size
        self.log: list[tuple] = []

    @property
    def bytes_sent(self) -> int:
        return self.inner.bytes_sent

    @property
    def bytes_received(self) -> int:
        return self.inner.bytes_received

    def send(self, peer: int, key: str, array: Any) -> None:
        self.log.append(("send", peer, key, int(array.nbytes)))
        self.inner.send(peer, key, array)

    def recv(self, peer: int, key: str) -> Any:
        self.log.append(("recv", peer, key))
        return self.inner.recv(peer, key)


def recorded(size: int, work: Callable[[RecordingTransport], Any]) -> list[list[tuple]]:
    """Run ``work(transport)`` on ``size`` threads, one per rank; each rank's log."""
    transports = [RecordingTransport(t) for t in ThreadTransport.group(size, timeout=10)]
    errors: list[BaseException] = []

    def run(transport: RecordingTransport) -> None:
        try:
            work(transport)
        except BaseException as error:  # re-raised below, on the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(t,)) for t in transports]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    if errors:
        raise errors[0]
    return [t.log for t in transports]


def described(programs: dict[str, list], devices: Sequence[str]) -> list[list[tuple]]:
    """The same log, read off simulator programs (computes left out)."""
    rank = {device: number for number, device in enumerate(devices)}
    logs = []
    for device in devices:
        log = []
        for action in programs.get(device, []):
            if isinstance(action, Send):
                log.append(("send", rank[action.to], action.key, action.nbytes))
            elif isinstance(action, Recv):
                log.append(("recv", rank[action.source], action.key))
        logs.append(log)
    return logs
