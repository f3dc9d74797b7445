"""Another local user can neither hijack, read nor stall a run's shared memory
(docs/security/shared-memory.md): every channel FIFO, probe and segment and the host's copy of
the data set lie in a private directory per run whose name reveals nothing; what that user
plants at a run's own path fails the run at once, naming the path and its owner; sweeps leave
that user's objects alone and remove only this user's finished runs."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.security.conftest import made_by_a_killed_process
from workbench.runtime import shared_memory
from workbench.runtime.shared_memory_channel import ChannelReceiver, ChannelSender
from workbench.safe_io import ForeignPathError

pytestmark = pytest.mark.integration

SHM = Path("/dev/shm")
RUN_ID = "5ca1ab1e0b0e"  # a fixed run id: the attacker knows it in advance
LEADER = "tcp://127.0.0.1:40000"
# The attacker's scripts use the standard library only.
PYTHON = sys.executable


def names_without_private_directory(run_id: str) -> list[str]:
    """Every name in /dev/shm a run ``run_id`` would use if its objects were not in a private
    directory: ``dtrain-<id>-<src>-<dst>-{ready,done,probe}`` and the data set's segment."""
    prefix = f"dtrain-{run_id}"
    leader = hashlib.sha1(LEADER.encode()).hexdigest()[:8]
    names = [f"{prefix}-dataset-{leader}"]
    for source, target in ((0, 1), (1, 0)):
        names += [f"{prefix}-{source}-{target}-{end}" for end in ("ready", "done", "probe")]
    return names


def private_directory(run_id: str) -> str:
    """Where run ``run_id`` keeps its objects, as anyone who learned the run id computes it."""
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:32]
    return str(SHM / f"dtrain-{os.geteuid()}-{digest}")


PLANT = """
import os, sys
for path in sys.argv[1:]:
    if path.endswith(("-ready", "-done")):
        os.mkfifo(path, 0o666)
    else:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    os.chmod(path, 0o666)
"""

# What the other user reads back from what it planted: a writer that opened one of its FIFOs
# or files would have left a header or bytes there.
READ_BACK = """
import json, os, sys
found = {}
for path in sys.argv[1:]:
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        found[path] = len(os.read(descriptor, 65536))
    except BlockingIOError:
        found[path] = 0
    finally:
        os.close(descriptor)
print(json.dumps(found))
"""


def _as(other_user, source: str, *argv: str) -> subprocess.CompletedProcess:
    done = other_user.run([PYTHON, "-c", source, *argv], timeout=30, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


def _remove_theirs(uid: int) -> None:
    """Remove what the other user left in /dev/shm."""
    for entry in SHM.iterdir():
        with contextlib.suppress(FileNotFoundError):
            if entry.lstat().st_uid != uid or not entry.name.startswith("dtrain-"):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink()


@pytest.fixture
def attacker(other_user):
    yield other_user
    _remove_theirs(other_user.uid)


def _dataset():
    from workbench.data.user_arrays import fit_arrays_dataset

    generator = np.random.default_rng(0)
    return fit_arrays_dataset(generator.random((40, 5)), generator.integers(0, 3, 40))


# --- (a) every name the run could have used, made first with mode 0666 -----------------------


def test_names_planted_before_the_run_are_never_used_or_read(attacker):
    from workbench.runtime import host_dataset

    planted = [str(SHM / name) for name in names_without_private_directory(RUN_ID)]
    _as(attacker, PLANT, *planted)
    inbox: dict = {}
    ends = []
    try:
        for source, target in ((0, 1), (1, 0)):
            ends.append(ChannelSender(RUN_ID, source, target))
            ends.append(ChannelReceiver(RUN_ID, source, target, inbox.__setitem__))
        for index, (sender, receiver) in enumerate(zip(ends[::2], ends[1::2])):
            sender.send(f"k{index}", np.full(6, float(index)), timeout=1.0)
            receiver.on_readable()
            assert inbox.pop(f"k{index}").copy().tolist() == [float(index)] * 6
        dataset = _dataset()
        shared = host_dataset.publish_dataset(
            RUN_ID, dataset.name, 0, dataset, SimpleNamespace(address=LEADER)
        )
        assert shared is not None and shared.path not in planted
        np.testing.assert_array_equal(host_dataset.read_segment(shared).x_train, dataset.x_train)
        host_dataset.release_segment(RUN_ID, shared.path)
        host_dataset.forget_dataset(RUN_ID)
    finally:
        for end in ends:
            end.close()
        shared_memory.unlink_run_segments(RUN_ID)
    read = json.loads(_as(attacker, READ_BACK, *planted).stdout)
    assert read == dict.fromkeys(planted, 0), "the run wrote into objects another user made"
    for path in planted:  # untouched: still theirs, still where they were
        assert os.lstat(path).st_uid == attacker.uid


# --- (b) an object at the run's own path: the run fails at once, naming it and its owner -----


PLANT_AT = """
import os, sys
kind, path = sys.argv[1:]
if kind == "directory":
    os.mkdir(path)
    os.chmod(path, 0o777)
elif kind == "symlink":
    os.symlink("/tmp", path)
else:
    os.mkfifo(path, 0o666)
"""


def _fails_fast(make, path: str, owner: str) -> None:
    start = time.monotonic()
    with pytest.raises(ForeignPathError) as refused:
        make()
    assert time.monotonic() - start < 2.0
    assert path in str(refused.value) and owner in str(refused.value)


@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo"])
def test_an_object_planted_at_a_runs_directory_fails_the_run_within_2s(attacker, kind):
    from workbench.runtime import host_dataset

    run_id = f"planted-{kind}-{os.getpid()}"
    path = private_directory(run_id)
    _as(attacker, PLANT_AT, kind, path)
    dataset = _dataset()
    _fails_fast(lambda: ChannelSender(run_id, 0, 1), path, attacker.name)
    _fails_fast(lambda: ChannelReceiver(run_id, 0, 1, lambda *_: None), path, attacker.name)
    _fails_fast(
        lambda: host_dataset.publish_dataset(
            run_id, dataset.name, 0, dataset, SimpleNamespace(address=LEADER)
        ),
        path,
        attacker.name,
    )
    assert os.lstat(path).st_uid == attacker.uid  # left where it was


def test_an_object_of_another_user_inside_a_runs_directory_fails_the_run(attacker):
    run_id = f"planted-inside-{os.getpid()}"
    directory = shared_memory.hold_run_directory(run_id)
    try:
        fifo = os.path.join(directory, "0-1-ready")
        os.mkfifo(fifo, 0o666)
        os.chown(fifo, attacker.uid, attacker.gid)  # however it got in
        _fails_fast(lambda: ChannelSender(run_id, 0, 1), fifo, attacker.name)
    finally:
        shared_memory.release_run_directory(run_id)
        shared_memory.unlink_run_segments(run_id)
    assert not os.path.lexists(directory)


# --- (c) a real run while another user races for its names ------------------------------------


RACE = r"""
import json, os, select, stat, sys, time
SHM = "/dev/shm"
me = os.geteuid()
deadline = time.monotonic() + float(sys.argv[1])
seen, opened, planted, denied, rounds = set(), [], 0, 0, 0

def plant(path, kind):
    global planted
    try:
        if kind == "fifo":
            os.mkfifo(path, 0o666)
        elif kind == "file":
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        else:
            os.symlink("/tmp", path)
        os.chmod(path, 0o666, follow_symlinks=False) if kind != "link" else None
        planted += 1
    except OSError:
        pass

def derived(name):
    # Today's names and the private directory's, for every prefix of what was seen.
    base = name.split(".")[0]
    parts = base[len("dtrain-"):].split("-")
    prefixes = ["dtrain-" + "-".join(parts[:k]) for k in range(1, len(parts) + 1)]
    names = []
    for prefix in prefixes:
        for pair in ("0-1", "1-0"):
            names += [(f"{prefix}-{pair}-ready", "fifo"), (f"{prefix}-{pair}-done", "fifo"),
                      (f"{prefix}-{pair}-probe", "file"), (f"{prefix}-{pair}-0", "link")]
    for inside in ("lock", "0-1-ready", "1-0-ready", "0-1-done", "1-0-done", "0-1-probe"):
        names.append((f"{base}/{inside}", "fifo"))
    return names

def try_read(path):
    global denied
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        denied += 1
        return
    try:
        if stat.S_ISDIR(os.fstat(descriptor).st_mode):
            entries = os.listdir(path)
            opened.append(path + "/")
            for entry in entries:
                try_read(os.path.join(path, entry))
        else:
            try:
                opened.append(f"{path} ({len(os.read(descriptor, 65536))} bytes)")
            except OSError:
                opened.append(path)
    except OSError:
        denied += 1
    finally:
        os.close(descriptor)

while time.monotonic() < deadline and not select.select([sys.stdin], [], [], 0)[0]:
    rounds += 1
    for name in os.listdir(SHM):
        path = os.path.join(SHM, name)
        try:
            mine = os.lstat(path).st_uid == me
        except OSError:
            continue
        if not name.startswith("dtrain-") or mine:
            continue
        if name not in seen:
            seen.add(name)
            for derived_name, kind in derived(name):
                plant(os.path.join(SHM, derived_name), kind)
        try_read(path)
    time.sleep(0.003)
print(json.dumps({"seen": sorted(seen), "opened": opened, "planted": planted,
                  "denied": denied, "rounds": rounds}))
"""

MODEL_FLAGS = ["--steps", "4", "--hidden", "16", "--batch-size", "32", "--no-calibrate"]
MIRRORED = ["--strategy", "mirrored", "--devices", "2"]


def _final_loss(*flags: str) -> float:
    from workbench.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["run", *flags, *MODEL_FLAGS, "--json"])
    assert code == 0, "the run failed"
    return json.loads(out.getvalue())["final_loss"]


def test_a_mirrored_run_is_unaffected_while_another_user_races_for_its_names(attacker):
    # Without any cluster to race for: the same steps on the same rows, on one device (a
    # mirrored run differs from it only by the order of float additions).
    reference = _final_loss("--strategy", "one-device")
    # DTRAIN_HIJACK_RACE_SECONDS: race that long, one run after another (default: one run).
    race = float(os.environ.get("DTRAIN_HIJACK_RACE_SECONDS", "0"))
    racer = attacker.popen(
        [PYTHON, "-c", RACE, str(max(race, 600.0))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    start = time.monotonic()
    losses = []
    try:
        time.sleep(0.2)  # the racer watches before the run starts
        losses.append(_final_loss(*MIRRORED))
        while time.monotonic() - start < race:
            losses.append(_final_loss(*MIRRORED))
    finally:
        out, err = racer.communicate("stop\n", timeout=30)
    assert racer.returncode == 0, err
    report = json.loads(out)
    seconds = time.monotonic() - start
    print(f"raced {seconds:.1f} s over {len(losses)} runs: {report}")
    assert losses == pytest.approx([reference] * len(losses), rel=1e-6)
    assert len(set(losses)) == 1  # and every mirrored run exactly the same
    runs_seen = [name for name in report["seen"] if name.startswith(f"dtrain-{os.geteuid()}-")]
    assert report["rounds"] > 10 and runs_seen, "the racer never saw a run's directory"
    assert report["opened"] == [], "another user opened objects of the run"


# --- (d) sweeps: another user's objects are reported and left alone ---------------------------


PLANT_FOREIGN = """
import os, sys
directory, file, fifo, link = sys.argv[1:]
os.mkdir(directory, 0o777)
os.chmod(directory, 0o777)
os.close(os.open(os.path.join(directory, "lock"), os.O_CREAT | os.O_WRONLY, 0o666))
os.close(os.open(file, os.O_CREAT | os.O_WRONLY, 0o666))
os.mkfifo(fifo, 0o666)
os.symlink("/tmp", link)
"""


def test_another_users_objects_are_reported_and_skipped_by_every_sweep(attacker, capfd):
    run_id = f"foreign-{os.getpid()}"
    directory = private_directory(run_id)  # at the run's own name
    lookalike = str(SHM / f"dtrain-{os.geteuid()}-{'f' * 32}")
    fifo = str(SHM / f"dtrain-{run_id}-0-1-ready")  # a name of the run, without a directory
    link = str(SHM / f"dtrain-{os.geteuid()}-{'e' * 32}")
    _as(attacker, PLANT_FOREIGN, directory, lookalike, fifo, link)
    assert shared_memory.unlink_run_segments(run_id) == []
    swept = shared_memory.sweep_stale_run_directories()
    assert not {directory, lookalike, fifo, link} & set(swept)
    for path in (directory, lookalike, fifo, link):
        assert os.lstat(path).st_uid == attacker.uid, f"{path} was removed"
    assert os.path.exists(os.path.join(directory, "lock"))
    reported = capfd.readouterr().err
    assert directory in reported and attacker.name in reported


# --- (e) the sweep: a dead run's directory goes, a live one stays ------------------------------


def _held_by_a_killed_process(run_id: str) -> str:
    """Run ``run_id``'s directory, held by a process then killed with SIGKILL."""
    return made_by_a_killed_process(lambda: shared_memory.hold_run_directory(run_id))


def test_the_stale_sweep_removes_a_dead_runs_directory_and_keeps_a_live_one():
    live_id, dead_id = f"live-{os.getpid()}", f"dead-{os.getpid()}"
    live = shared_memory.hold_run_directory(live_id)
    dead = _held_by_a_killed_process(dead_id)
    Path(dead, "0-1-ready").touch(mode=0o600)  # what the dead run left
    try:
        swept = shared_memory.sweep_stale_run_directories()
        assert dead in swept and not os.path.lexists(dead)
        assert live not in swept and stat.S_ISDIR(os.lstat(live).st_mode)
        assert not [name for name in os.listdir(SHM) if name.startswith(Path(dead).name + ".")]
    finally:
        shared_memory.release_run_directory(live_id)
    assert shared_memory.sweep_stale_run_directories().count(live) == 1
    assert not os.path.lexists(live)
