"""The labels of a collective reach every action it is made of: each all-reduce algorithm, the
ring's explicit messages and its vectorised action, the reduce and broadcast inside groups."""

from __future__ import annotations

import pytest

from workbench.simulate import (
    ALLREDUCE_ALGORITHMS,
    Labels,
    RingOptions,
    allreduce_programs,
    hierarchical_allreduce_programs,
    ring_allreduce_programs,
)

DEVICES = ["a", "b", "c", "d"]
GROUPS = [["a", "b"], ["c", "d"]]


def _labels_of(programs):
    return {(action.phase, action.stream) for actions in programs.values() for action in actions}


@pytest.mark.parametrize("algorithm", ALLREDUCE_ALGORITHMS)
@pytest.mark.parametrize("vectorised", [False, True])
def test_every_algorithm_labels_all_its_actions(algorithm, vectorised):
    programs = allreduce_programs(
        DEVICES, 64, 1e-9, "g", algorithm, GROUPS, vectorised=vectorised, phase="p", stream="s"
    )
    assert _labels_of(programs) == {("p", "s")}


def test_ring_options_carry_the_labels_to_the_leaders_ring_and_the_groups():
    options = RingOptions(vectorised=False, labels=Labels("bucket", "communication"))
    grouped = hierarchical_allreduce_programs(GROUPS, 64, 1e-9, "g", options)
    ring = ring_allreduce_programs(DEVICES, 64, 1e-9, "g", options)
    assert _labels_of(grouped) == _labels_of(ring) == {("bucket", "communication")}


def test_the_default_labels_are_the_allreduce_phase_on_the_main_stream():
    assert _labels_of(ring_allreduce_programs(DEVICES, 64, 0.0, "g")) == {("allreduce", "main")}
