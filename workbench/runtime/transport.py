"""How collective algorithms move tensors: a point-to-point ``Transport`` between ranks.

Algorithms are written against this small interface, so the same ring or tree code runs over
in-process queues (tests, 1..8 ranks on threads) and over the workers' peer-to-peer Dask comms
(real runs). Every transport counts the bytes it sends and receives, which is what the
collectives' traffic figures and the events report.
"""

from __future__ import annotations

import queue
import threading
from collections import defaultdict
from typing import Any, Protocol

from workbench.runtime.devices import array_namespace


class StallError(TimeoutError):
    """A receive waited longer than the stall timeout (names the peer and the key)."""


class Transport(Protocol):
    # Read-only here: a collective reads a transport's position and traffic; only the
    # transport itself counts its bytes (a subgroup's view forwards its parent's counts).
    @property
    def rank(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def bytes_sent(self) -> int: ...

    @property
    def bytes_received(self) -> int: ...

    def send(self, peer: int, key: str, array: Any) -> None: ...

    def recv(self, peer: int, key: str) -> Any: ...

    def count_traffic(self, sent: int, received: int) -> None:
        """Count bytes a collective moved past :meth:`send` and :meth:`recv` (NCCL's own
        kernels)."""
        ...


def apply_received(out: Any, value: Any, add_to: Any = None) -> None:
    """``out = add_to + value`` (``out`` may be ``add_to`` itself) or, without ``add_to``,
    ``out = value``; in place (``out`` may be a slice)."""
    if add_to is None:
        out[...] = value
    else:
        array_namespace(out).add(add_to, value, out=out)


def recv_into(transport: Transport, peer: int, key: str, out: Any, add_to: Any = None) -> None:
    """Receive a tensor shaped like ``out`` and store ``add_to + tensor`` (or the tensor alone)
    in ``out``. Transports that can do this without materialising the tensor first (shared
    memory) provide their own ``recv_into``; for the others it is ``recv`` then the update.

    Examples
    --------
    >>> import numpy as np
    >>> a, b = ThreadTransport.group(2)
    >>> a.send(1, "x", np.ones(3))
    >>> out = np.arange(3.0)
    >>> recv_into(b, 0, "x", out, add_to=out)
    >>> out
    array([1., 2., 3.])
    """
    own = getattr(transport, "recv_into", None)
    if own is not None:
        own(peer, key, out, add_to)
    else:
        apply_received(out, transport.recv(peer, key), add_to)


class ThreadTransport:
    """Ranks as threads of one process, talking through per-(key) queues.

    Use :meth:`group` to make ``size`` connected transports.

    Examples
    --------
    >>> import numpy as np
    >>> a, b = ThreadTransport.group(2)
    >>> a.send(1, "x", np.arange(3.0))
    >>> b.recv(0, "x")
    array([0., 1., 2.])
    """

    def __init__(
        self, rank: int, size: int, boxes: dict, lock: threading.Lock, timeout: float
    ) -> None:
        self.rank, self.size = rank, size
        self._boxes, self._lock, self.timeout = boxes, lock, timeout
        self.bytes_sent = self.bytes_received = 0

    @classmethod
    def group(cls, size: int, timeout: float = 30.0) -> list[ThreadTransport]:
        boxes: dict = defaultdict(queue.Queue)
        lock = threading.Lock()
        return [cls(rank, size, boxes, lock, timeout) for rank in range(size)]

    def _box(self, source: int, target: int, key: str) -> queue.Queue:
        with self._lock:
            return self._boxes[(source, target, key)]

    def count_traffic(self, sent: int, received: int) -> None:
        self.bytes_sent += sent
        self.bytes_received += received

    def send(self, peer: int, key: str, array: Any) -> None:
        # A copy, as a real wire would make: the sender may overwrite its buffer afterwards.
        self._box(self.rank, peer, key).put(array.copy())
        self.bytes_sent += array.nbytes

    def recv(self, peer: int, key: str) -> Any:
        try:
            array = self._box(peer, self.rank, key).get(timeout=self.timeout)
        except queue.Empty:
            raise StallError(
                f"rank {self.rank} waited {self.timeout}s for {key!r} from rank {peer}"
            ) from None
        self.bytes_received += array.nbytes
        return array
