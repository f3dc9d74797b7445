"""Collectives as calibration timed them (``calibration/collectives_probe.py``), as simulator
programs: the devices meet at the first of them (an empty message there and back: a
collective's first exchanges wait for its last rank), then each spends the measured time,
without taking a share of its host's cores: what was timed already ran on all the devices at
once, sharing the cores as they do here, and over a network it is mostly waiting.

The all-reduce of a mirrored bucket; central storage's exchange: every replica's gradients
reduced to rank 0, rank 0's update, its new values broadcast (the replicas meet again after
the update, as they wait for the broadcast).
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.simulate import Action, Compute, Link, Recv, Send


def meet_at_first(devices: Sequence[str], key: str, **labels) -> dict[str, list[Action]]:
    """Every device waits until all have arrived: each tells the first, which answers all."""
    first, others = devices[0], devices[1:]
    programs: dict[str, list[Action]] = {
        first: [
            *(Recv(device, f"{key}/arrive/{device}", **labels) for device in others),
            *(Send(device, 0, f"{key}/go/{device}", **labels) for device in others),
        ]
    }
    for device in others:
        programs[device] = [
            Send(first, 0, f"{key}/arrive/{device}", **labels),
            Recv(first, f"{key}/go/{device}", **labels),
        ]
    return programs


def measured_allreduce(
    link: Link, nbytes: int, devices: Sequence[str], key: str, **labels
) -> dict[str, list[Action]]:
    """A bucket's all-reduce of ``nbytes``, as measured (``link``: its fitted time)."""
    met = meet_at_first(devices, key, **labels)
    reduced = Compute(link.seconds(nbytes), "allreduce", cpu=False, **labels)
    return {device: [*met[device], reduced] for device in devices}


def measured_central_exchange(
    reduce: Link,
    broadcast: Link,
    bucket_bytes: Sequence[int],
    update_seconds: float,
    devices: Sequence[str],
    key: str,
) -> dict[str, list[Action]]:
    """Central storage after the gradients: each bucket reduced to the first device, its
    update, each bucket's new values broadcast, as measured."""
    pushed = sum(reduce.seconds(nbytes) for nbytes in bucket_bytes)
    pulled = sum(broadcast.seconds(nbytes) for nbytes in bucket_bytes)
    arrive = meet_at_first(devices, f"{key}/push", phase="ps-push")
    updated = meet_at_first(devices, f"{key}/pull", phase="ps-pull")
    programs = {}
    for index, device in enumerate(devices):
        actions = [*arrive[device], Compute(pushed, "reduce", phase="ps-push", cpu=False)]
        if index == 0:
            actions.append(Compute(update_seconds, "update", phase="update"))
        pull = Compute(pulled, "broadcast", phase="ps-pull", cpu=False)
        programs[device] = [*actions, *updated[device], pull]
    return programs
