"""How long a message takes from one device to another.

The model: a directed link (source, destination) has a ``bandwidth`` (bytes/s) and a
``latency`` (s). Sending ``n`` bytes keeps the sender's stream busy while it puts them on the
link, ``n / bandwidth``; then the sender goes on and the message is available at the
destination ``latency`` later. So a message posted on an idle link at ``t`` arrives at
``t + n / bandwidth + latency``. A link carries one message's bytes at a time: a second
transfer on the same directed link starts putting its bytes when the first has put all of its
own (first posted, first served), while messages already on their way overlap their latency.
A receive blocks its stream until its message has arrived, or returns at once if it already
has.

Why this shape: the sender does the work. Our shared-memory channels copy the tensor into a
segment (the sender's time, at memory bandwidth) and append a line to a FIFO, and the receiver
then reads the segment when it asks for the message; over TCP the sender's thread serialises
the frames; on GPUs NCCL's kernels push the bytes through NVLink or the NIC. Latency is what a
message pays however small it is (the FIFO line, the RPC, the kernel launch). Links of
different (source, destination) pairs are independent: the model has no shared NIC or switch.
On a host of limited cores (``simulate(..., cores=...)``) the put is CPU work, and takes
longer while the host's cores are shared (:mod:`~workbench.simulate.cores`).

A link model is any callable ``(source, destination) -> Link``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """A directed link: ``latency`` in seconds, ``bandwidth`` in bytes/s (``math.inf`` for a
    free one), ``name`` only for display.

    Examples
    --------
    >>> Link(latency=0.5, bandwidth=1e6).seconds(1_000_000)
    1.5
    """

    latency: float
    bandwidth: float
    name: str = ""

    def __post_init__(self) -> None:
        if not self.latency >= 0:
            raise ValueError(f"link latency must be >= 0 seconds, got {self.latency}")
        if not self.bandwidth > 0:
            raise ValueError(f"link bandwidth must be > 0 bytes/s, got {self.bandwidth}")

    def put_seconds(self, nbytes: int) -> float:
        """How long the sender is busy putting ``nbytes`` on the link.

        Examples
        --------
        >>> Link(1e-6, 2e9).put_seconds(4_000)
        2e-06
        """
        return nbytes / self.bandwidth

    def seconds(self, nbytes: int) -> float:
        """From posting ``nbytes`` on an idle link to their arrival: put time plus latency.

        Examples
        --------
        >>> import math
        >>> Link(0.0, math.inf).seconds(10**9)
        0.0
        """
        return self.put_seconds(nbytes) + self.latency


LinkModel = Callable[[str, str], Link]


def uniform(link: Link) -> LinkModel:
    """A link model where every pair of devices is joined by the same kind of ``link``.

    Examples
    --------
    >>> uniform(Link(0.001, 1e9))("a", "b")
    Link(latency=0.001, bandwidth=1000000000.0, name='')
    """

    def between(source: str, destination: str) -> Link:
        return link

    return between
