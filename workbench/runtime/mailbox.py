"""The receiving half of Send/Recv: a rendezvous table of tensors keyed by rendezvous key.

A sender's message is stored under its key by the worker's comm handler (on the event loop); a
Recv in the task thread waits for that key. As in TF's rendezvous, whichever side arrives first
waits for the other; a Recv that waits past the stall timeout raises instead of hanging.

A service that answers messages rather than waiting for one it knows (a parameter shard) has
the messages under a prefix handed to it as they arrive (:meth:`Mailbox.route`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

Deliver = Callable[[str, Any], None]


class Mailbox:
    """Thread-safe key -> tensor table with blocking, timed ``take``.

    Examples
    --------
    >>> box = Mailbox()
    >>> box.put("run/step0/grad", 42)
    >>> box.take("run/step0/grad", timeout=1.0)
    42
    """

    def __init__(self) -> None:
        self._items: dict[str, Any] = {}
        self._routes: dict[str, Deliver] = {}
        self._arrived = threading.Condition()

    def route(self, prefix: str, deliver: Deliver) -> None:
        """Hand every message whose key starts with ``prefix`` to ``deliver(key, value)`` as
        it arrives (on the thread that puts it), instead of keeping it for a ``take``.

        Examples
        --------
        >>> box, seen = Mailbox(), []
        >>> box.route("run/0->2/", lambda key, value: seen.append((key, value)))
        >>> box.put("run/0->2/pull/7", 1); box.put("run/2->0/grant/7", 2)
        >>> seen, len(box)
        ([('run/0->2/pull/7', 1)], 1)
        """
        with self._arrived:
            self._routes[prefix] = deliver

    def put(self, key: str, value: Any) -> None:
        with self._arrived:
            deliver = next((d for p, d in self._routes.items() if key.startswith(p)), None)
        if deliver is not None:
            deliver(key, value)
            return
        with self._arrived:
            if key in self._items:
                # At-least-once delivery may repeat a message; the first copy wins.
                return
            self._items[key] = value
            self._arrived.notify_all()

    def take(self, key: str, timeout: float) -> Any:
        """Remove and return the tensor under ``key``; raise TimeoutError after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while key not in self._items:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(key)
                self._arrived.wait(left)
            return self._items.pop(key)

    def poll(self, key: str) -> tuple[bool, Any]:
        """``(True, tensor)`` removed from under ``key`` if it is here now, else
        ``(False, None)``, without waiting."""
        with self._arrived:
            if key in self._items:
                return True, self._items.pop(key)
        return False, None

    def discard(self, prefix: str) -> None:
        """Forget every pending tensor whose key starts with ``prefix`` (a finished run), and
        its routes."""
        with self._arrived:
            for route in [p for p in self._routes if p.startswith(prefix)]:
                del self._routes[route]
            for key in [k for k in self._items if k.startswith(prefix)]:
                del self._items[key]

    def __len__(self) -> int:
        with self._arrived:
            return len(self._items)
