"""Joining what is not a Dask scheduler, and run ids that point out of the store: each is
refused with one error line naming the flag (exit 2, ``UsageError`` in the magic) in a
bounded time, before any cluster work."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from IPython.core.error import UsageError

from workbench.store import RunStore

cli_main = importlib.import_module("workbench.cli.main")
# The probe waits 3 s for a scheduler's handshake; refusals must come well before a user
# would think the command hangs.
REFUSED_WITHIN_SECONDS = 8.0


@contextlib.contextmanager
def _server(greeting: bytes | None) -> Iterator[str]:
    """A TCP server on loopback that accepts and then says ``greeting`` (None: nothing)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(connection)
            if greeting is not None:
                connection.sendall(greeting)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for connection in held:
            connection.close()
        listener.close()


def _run(argv: list[str]) -> tuple[int, str, float]:
    errors = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        code = cli_main.main(argv)
    return code, errors.getvalue().strip(), time.perf_counter() - started


GREETINGS = {
    "silent": None,
    "http": b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
    "ssh": b"SSH-2.0-OpenSSH_9.2p1\r\n",
    "huge-frame": (2**62).to_bytes(8, "little"),
}


@pytest.mark.parametrize("kind", GREETINGS)
def test_a_server_that_is_not_a_scheduler_is_refused_in_bounded_time(kind):
    with _server(GREETINGS[kind]) as address:
        argv = ["run", "--strategy", "mirrored", "--devices", "2", "--cluster", address]
        code, message, seconds = _run(argv)
    assert code == 2, message
    assert message.startswith("dtrain run: error: --cluster:"), message
    assert address in message and "Traceback" not in message
    assert seconds < REFUSED_WITHIN_SECONDS


@pytest.mark.parametrize("text", ["silent", "fifo", "zero", "garbage"])
def test_a_scheduler_file_that_is_not_one_is_refused(text, tmp_path):
    path = tmp_path / "scheduler.json"
    with _server(None) as address:
        if text == "silent":
            path.write_text(json.dumps({"address": address}))
        elif text == "fifo":
            os.mkfifo(path)  # opening it for reading would block for ever
        elif text == "zero":
            path = "/dev/zero"  # reading it would never end
        else:
            path.write_text("not json")
        argv = ["run", "--strategy", "mirrored", "--devices", "2", "--scheduler-file", str(path)]
        code, message, seconds = _run(argv)
    assert code == 2, message
    assert message.startswith("dtrain run: error: --scheduler-file:"), message
    assert str(path) in message or address in message
    assert seconds < REFUSED_WITHIN_SECONDS


def test_the_magic_refuses_a_silent_scheduler_with_a_usage_error(shell):
    with _server(None) as address, pytest.raises(UsageError, match="--cluster"):
        shell.run_line_magic("dtrain", f"--strategy mirrored --devices 2 --cluster {address}")


def test_export_refuses_run_ids_that_leave_the_store(tmp_path, store_root):
    # A "run" planted beside the store, which "../outside" would name.
    outside = store_root.parent / "outside"
    outside.mkdir(parents=True)
    (outside / "status.json").write_text(json.dumps({"state": "finished", "started": 0}))
    RunStore().private_root()
    target = tmp_path / "exports" / "board"  # "../outside" would write exports/outside
    for run_id in ("../outside", "/etc", "a" * 5000, ".hidden"):
        code, message, _ = _run(["export", "--tensorboard", str(target), run_id])
        assert code == 2, message
        assert message.startswith("dtrain export: error: RUN_ID:"), message
    assert not (tmp_path / "exports").exists()
