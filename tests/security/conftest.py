"""Attacks by another local user: a throwaway account made for the test and removed after it
(the tests skip, saying why, where accounts cannot be made: not root, no ``useradd``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int

    def run(self, argv: list[str], timeout: float = 60.0, **options) -> subprocess.CompletedProcess:
        """``argv`` as this user (no supplementary groups, HOME in a directory of its own)."""
        return subprocess.run(self.command(argv), timeout=timeout, **options)

    def popen(self, argv: list[str], **options) -> subprocess.Popen:
        return subprocess.Popen(self.command(argv), **options)

    def python(self, source: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """Python ``source`` run as this user; its stdout and stderr captured as text."""
        return self.run(
            [sys.executable, "-c", source], timeout=timeout, capture_output=True, text=True
        )

    def command(self, argv: list[str]) -> list[str]:
        return [
            "setpriv",
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--",
            *argv,
        ]


def _make_user() -> LocalUser:
    if os.geteuid() != 0:
        pytest.skip("another local user needs root to create a throwaway account")
    for tool in ("useradd", "userdel", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"another local user needs {tool}, which this machine lacks")
    name = f"dtrain-other-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"useradd could not create a throwaway account: {made.stderr.strip()}")
    import pwd

    entry = pwd.getpwnam(name)
    return LocalUser(name, entry.pw_uid, entry.pw_gid)


@pytest.fixture(scope="session")
def other_user():
    """A second local user, for the whole test session (making one costs a few ms, but
    every process it leaves must be gone before userdel)."""
    user = _make_user()
    yield user
    subprocess.run(["pkill", "-KILL", "-u", str(user.uid)], capture_output=True)
    subprocess.run(["userdel", user.name], capture_output=True)


def made_by_a_killed_process(make: Callable[[], str]) -> str:
    """What ``make`` returns (a path it made), made in a child process then killed with
    SIGKILL: as ``kill -9`` of a client, nothing of its own cleanup ran."""
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child makes the path and waits to be killed
        try:
            os.write(writer, make().encode() + b"\n")
            signal.pause()
        finally:
            os._exit(1)
    os.close(writer)
    with os.fdopen(reader) as lines:
        path = lines.readline().strip()
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    return path


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs, so a run's recording fills it."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a tiny tmpfs needs root and mount")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)
