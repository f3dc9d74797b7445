"""The run store against damaged, hostile and crashed runs: strict JSON whatever a run wrote,
a listing that flags what it cannot read instead of failing, the run-id rule, a store root
that another user made or opened refused, stop requests refused for another user's run, a
killed run marked lost and a full disk ending the run failed (docs/security/store.md, "Run
store")."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from workbench.events.records import PhaseEvent, ScalarEvent
from workbench.server import RunsManager
from workbench.store import RunStore
from workbench.store import run_store as run_store_module


def strict_loads(text: str):
    """JSON as a browser's ``JSON.parse`` reads it: NaN and Infinity are errors."""

    def refuse(token: str):
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def _config() -> dict:
    return {"strategy": "mirrored", "devices": 2, "steps": 4, "batch_size": 32}


def _finished(store: RunStore, run_id: str, started: float) -> None:
    recorder = store.create(run_id, _config(), steps=4)
    recorder.annotate(started=started)
    recorder.record(ScalarEvent("loss", 0, 1.5, 0.1))
    recorder.finish("finished", summary={"steps": 4})


def test_a_diverged_run_writes_strict_json_and_is_flagged(tmp_path, monkeypatch):
    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 0.0)
    store = RunStore(tmp_path)
    recorder = store.create("diverged", _config(), steps=4)
    recorder.record(ScalarEvent("loss", 0, float("nan"), 0.1))
    recorder.annotate(samples_per_second=float("inf"))
    recorder.finish("finished", summary={"final_loss": float("nan"), "steps": 4})
    path = tmp_path / "diverged"
    status = strict_loads((path / "status.json").read_text())
    assert status["loss"] is None and status["non_finite"] == ["loss", "samples_per_second"]
    assert strict_loads((path / "summary.json").read_text())["final_loss"] is None
    lines = (path / "events.jsonl").read_text().splitlines()
    assert strict_loads(lines[0])["value"] is None
    # Read back, the loss is NaN again (the charts draw it as a gap).
    [loss] = recorder.run.events()
    assert loss.value != loss.value
    [record] = RunsManager(store).runs()
    assert record["non_finite"] == ["loss", "samples_per_second"] and record["loss"] is None


def test_damaged_runs_are_listed_flagged_and_the_others_intact(tmp_path):
    store = RunStore(tmp_path)
    _finished(store, "good-old", started=1.0)
    _finished(store, "good-new", started=4.0)
    truncated = tmp_path / "truncated"
    _finished(store, "truncated", started=2.0)
    text = (truncated / "status.json").read_text()
    (truncated / "status.json").write_text(text[: len(text) // 2])
    _finished(store, "a-list", started=3.0)
    (tmp_path / "a-list" / "status.json").write_text("[1, 2]")
    _finished(store, "bad-config", started=3.5)
    (tmp_path / "bad-config" / "config.json").write_bytes(b"\xff\xfe{")
    # Written before the store was strict: NaN and Infinity tokens.
    old = tmp_path / "old-nan"
    _finished(store, "old-nan", started=5.0)
    status = json.loads((old / "status.json").read_text())
    status.update(loss=float("nan"), samples_per_second=float("inf"))
    (old / "status.json").write_text(json.dumps(status))

    records = {record["id"]: record for record in RunsManager(store).runs()}
    assert set(records) == {"good-old", "good-new", "truncated", "a-list", "bad-config", "old-nan"}
    assert "status.json is not valid JSON" in records["truncated"]["damage"]
    assert "not a JSON object" in records["a-list"]["damage"]
    assert "config.json" in records["bad-config"]["damage"]
    assert {records[name]["state"] for name in ("truncated", "a-list", "bad-config")} == {"damaged"}
    assert records["old-nan"]["non_finite"] == ["loss", "samples_per_second"]
    assert records["old-nan"]["loss"] is None and records["old-nan"]["state"] == "finished"
    for name in ("good-old", "good-new"):
        assert records[name]["state"] == "finished" and records[name]["damage"] is None
        assert records[name]["loss"] == 1.5 and records[name]["non_finite"] == []
    strict_loads(json.dumps(list(records.values()), allow_nan=False))
    # An unknown id is still just unknown, and the clusters still list.
    with pytest.raises(KeyError):
        store.open("gone")
    assert RunsManager(store).clusters() == []


def test_the_run_id_rule():
    from workbench.launch.run_link import new_run_id
    from workbench.store import MAX_RUN_ID_LENGTH, valid_run_id

    for strategy in ("mirrored", "multi-worker-mirrored", "one-device", "parameter-server"):
        assert valid_run_id(new_run_id(strategy))
    for bad in ("", ".", "..", "../x", "a/b", ".hidden", "a" * (MAX_RUN_ID_LENGTH + 1), "a\0b"):
        assert not valid_run_id(bad), bad
    store = RunStore(tempfile.mkdtemp())
    for bad in ("..", "a" * 5000, "../../etc"):
        with pytest.raises(KeyError):
            store.open(bad)
    with pytest.raises(ValueError, match="run id"):
        store.create("../escape", _config())


@pytest.mark.parametrize("kind", ["world-writable", "symlink"])
def test_an_open_or_linked_store_root_is_refused(tmp_path, kind):
    from workbench.store import StoreError

    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    root = tmp_path / "runs"
    if kind == "symlink":
        root.symlink_to(real)
    else:
        root.mkdir()
        root.chmod(0o777)
    store = RunStore(root)
    for action in (store.private_root, store.runs, lambda: store.create("r", _config())):
        with pytest.raises(StoreError, match=str(root)):
            action()
    assert list(real.iterdir()) == []


def test_an_own_store_root_others_may_read_is_made_private(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    root.chmod(0o755)
    _finished(RunStore(root), "r", started=1.0)
    assert root.stat().st_mode & 0o777 == 0o700


def test_a_store_root_made_by_another_user_is_refused(other_user):
    from workbench.store import StoreError

    shared = Path(tempfile.mkdtemp(prefix="dtrain-shared-"))
    try:
        shared.chmod(0o777)
        root = shared / "runs"
        planted = other_user.python(
            "import json, os, pathlib\n"
            f"root = pathlib.Path({str(root)!r})\n"
            "(root / 'planted').mkdir(parents=True)\n"
            "os.chmod(root, 0o777)\n"
            "(root / 'planted' / 'config.json').write_text('{}')\n"
            "(root / 'planted' / 'status.json').write_text(json.dumps({'state': 'finished'}))\n"
        )
        assert planted.returncode == 0, planted.stderr
        store = RunStore(root)
        for action in (store.private_root, store.runs, lambda: store.open("planted")):
            with pytest.raises(StoreError) as refused:
                action()
            assert str(root) in str(refused.value) and other_user.name in str(refused.value)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_stopping_another_users_run_is_refused(tmp_path, other_user):
    store = RunStore(tmp_path)
    theirs = store.create("theirs", _config())  # a run whose status.json is another user's
    os.chown(theirs.run.path / "status.json", other_user.uid, other_user.gid)
    sleeper = other_user.popen([sys.executable, "-c", "import time; time.sleep(30)"])
    # setpriv drops to the other user before it execs Python: until then the pid is root's.
    deadline = time.monotonic() + 10
    while psutil.Process(sleeper.pid).uids().real != other_user.uid:
        assert time.monotonic() < deadline, "the other user's process never changed user"
        time.sleep(0.01)
    try:
        trained = store.create("trained-by-them", _config())
        status = trained.run.status()
        status["pid"] = sleeper.pid  # the process training it is another user's
        (trained.run.path / "status.json").write_text(json.dumps(status))
        manager = RunsManager(store)
        for run_id in ("theirs", "trained-by-them"):
            with pytest.raises(PermissionError, match=other_user.name):
                manager.stop(run_id)
            assert not (tmp_path / run_id / "stop-requested").exists()
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.integration
def test_a_killed_run_is_marked_lost_with_the_reason(tmp_path):
    # The process recording the run: killed with SIGKILL, it can never end the record.
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    recorder = RunStore(tmp_path).create("killed", _config())
    status = recorder.run.status()
    status["pid"] = process.pid
    (tmp_path / "killed" / "status.json").write_text(json.dumps(status))
    process.send_signal(signal.SIGKILL)
    process.wait()
    [run] = RunStore(tmp_path).runs()  # listing the store marks it
    status = json.loads((run.path / "status.json").read_text())
    assert status["state"] == "lost" and f"process {process.pid}" in status["error"]
    assert status["ended"] is not None
    assert RunsManager(RunStore(tmp_path)).runs()[0]["state"] == "lost"


def test_a_full_disk_ends_the_run_failed_with_the_reason(full_disk, monkeypatch):
    from workbench.store import StoreError

    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 0.0)
    store = RunStore(full_disk / "runs")
    recorder = store.create("filled", _config(), steps=100_000)
    with pytest.raises(StoreError, match="No space left on device"):
        for step in range(100_000):
            recorder.record(PhaseEvent("/task:0", "compute", step, step * 0.1, step * 0.1 + 1))
    recorder.record(ScalarEvent("loss", 1, 1.0, 1.0))  # once raised, later events are dropped
    recorder.finish("failed", error="StoreError: the disk is full")
    path = full_disk / "runs" / "filled"
    status = json.loads((path / "status.json").read_text())
    assert status["state"] == "failed" and "No space left on device" in status["error"]
    assert (path / "events.jsonl").read_bytes().endswith(b"\n")
    assert sorted(item.name for item in path.iterdir()) == [
        "config.json",
        "events.jsonl",
        "status.json",
    ]


def test_a_record_that_cannot_be_ended_raises_one_clear_error(tmp_path, monkeypatch):
    from workbench.store import StoreError

    recorder = RunStore(tmp_path).create("r", _config())

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("builtins.open", no_space)
    with pytest.raises(StoreError, match=r"could not record the end of run r .*No space"):
        recorder.finish("finished", summary={"steps": 1})


def test_an_events_file_is_read_up_to_its_last_whole_line(tmp_path):
    recorder = RunStore(tmp_path).create("r", _config())
    recorder.record(ScalarEvent("loss", 0, 2.0, 0.1))
    recorder.finish("finished")
    with (tmp_path / "r" / "events.jsonl").open("a") as file:  # a writer killed mid-line
        file.write(json.dumps(ScalarEvent("loss", 1, 1.0, 0.2).to_dict()))
    assert [event.step for event in recorder.run.events()] == [0]
