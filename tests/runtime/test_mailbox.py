"""The mailbox: messages kept for the task that takes them, or handed to a service."""

from __future__ import annotations

import threading

import pytest

from workbench.runtime.mailbox import Mailbox


def test_a_routed_prefix_is_handed_over_as_it_arrives_and_the_rest_is_kept():
    box, seen = Mailbox(), []
    box.route("run/0->2/", lambda key, value: seen.append((key, value)))
    box.put("run/0->2/push/1", "gradients")
    box.put("run/2->0/grant/1", "header")
    assert seen == [("run/0->2/push/1", "gradients")]
    assert box.poll("run/0->2/push/1") == (False, None)
    assert box.poll("run/2->0/grant/1") == (True, "header")
    assert box.poll("run/2->0/grant/1") == (False, None)  # taken once


def test_discarding_a_run_drops_its_routes_and_its_messages():
    box, seen = Mailbox(), []
    box.route("run/0->2/", lambda key, value: seen.append(key))
    box.put("run/1->0/a", 1)
    box.discard("run/")
    box.put("run/0->2/late", 2)  # no one answers for the run any more: kept, not handed
    assert seen == [] and len(box) == 1


def test_a_take_waits_for_the_message_and_times_out_naming_its_key():
    box = Mailbox()
    threading.Timer(0.05, box.put, ("k", 7)).start()
    assert box.take("k", timeout=5.0) == 7
    with pytest.raises(TimeoutError, match="missing"):
        box.take("missing", timeout=0.01)
