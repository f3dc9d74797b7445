"""TensorBoard event files, read back with TensorBoard's own reader: a run's losses, test
figures, pace and per-device figures as the run measured them, live (``--tensorboard``) and
exported from the run store (``dtrain export --tensorboard``)."""

import json
import time
from itertools import pairwise
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from workbench.cli.main import main
from workbench.config import RunConfig
from workbench.events import EventLog
from workbench.events.tensorboard import FLUSH_EVERY_S
from workbench.launch.runner import run_training
from workbench.runtime.devices import device_tag
from workbench.store import RunStore

SMALL = {"dataset": "synthetic:16:4:256", "hidden": (8,), "steps": 20, "batch_size": 32}
SMALL_FLAGS = ["--dataset", "synthetic:16:4:256", "--hidden", "8", "--batch-size", "32"]


def read_board(directory: Path) -> EventAccumulator:
    board = EventAccumulator(str(directory), size_guidance={"scalars": 0, "tensors": 0})
    board.Reload()
    return board


def scalars(board: EventAccumulator, tag: str) -> dict[int, float]:
    return {event.step: event.value for event in board.Scalars(tag)}


def flags_text(board: EventAccumulator) -> str:
    (text,) = board.Tensors("config/flags/text_summary")
    return text.tensor_proto.string_val[0].decode()


def hparams_of(board: EventAccumulator) -> dict:
    content = board.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {
        name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
        for name, value in start.hparams.items()
    }


def only_folder(root: Path) -> Path:
    (folder,) = root.iterdir()
    return folder


def assert_losses_match(board: EventAccumulator, log: EventLog) -> None:
    expected = {event.step: event.value for event in log.scalars("loss")}
    assert scalars(board, "train/loss") == pytest.approx(expected, rel=1e-6)


@pytest.mark.integration
def test_a_one_device_run_writes_its_losses_pace_and_flags(tmp_path):
    result = run_training(RunConfig(**SMALL, tensorboard=str(tmp_path)), progress=lambda _: None)
    summary, log = result.summary, result.log
    folder = only_folder(tmp_path)
    assert folder.name.endswith("-one-device")  # <time>-<strategy>: runs sort side by side
    board = read_board(folder)

    assert_losses_match(board, log)
    losses = scalars(board, "train/loss")
    assert sorted(losses) == list(range(20))
    assert losses[19] == pytest.approx(summary["final_loss"], rel=1e-6)
    rates = {event.step: event.value for event in log.scalars("lr")}
    assert scalars(board, "train/learning_rate") == pytest.approx(rates, rel=1e-6)
    last = log.scalars("loss")[-1].step
    assert scalars(board, "test/accuracy") == {last: pytest.approx(summary["test_accuracy"])}
    assert scalars(board, "test/loss") == {last: pytest.approx(summary["test_loss"], rel=1e-6)}

    # One compute phase per step: busy fraction and pace are over the time since the last step.
    (device,) = [d["device"] for d in summary["per_device"]]
    phases = sorted(log.phases(device), key=lambda event: event.step)
    utilization = scalars(board, f"device/{device_tag(device)}/utilization")
    pace = scalars(board, "train/samples_per_second")
    for previous, event in pairwise(phases):
        window = event.end - previous.end
        assert utilization[event.step] == pytest.approx(event.duration / window, rel=1e-5)
        assert pace[event.step] == pytest.approx(32 / window, rel=1e-5)
    assert all(v == 0 for v in scalars(board, f"device/{device_tag(device)}/bytes_sent").values())

    assert "| --strategy | one-device |" in flags_text(board)
    assert "| --hidden | 8 |" in flags_text(board)
    assert hparams_of(board)["strategy"] == "one-device"
    assert hparams_of(board)["batch_size"] == 32
    assert scalars(board, "hparam/test_accuracy") == {last: pytest.approx(summary["test_accuracy"])}


@pytest.mark.integration
def test_a_failing_run_still_closes_its_files_with_the_losses_so_far(tmp_path):
    def fail_in_epoch_two(line: str) -> None:
        if "epoch 2/" in line:
            raise RuntimeError("the notebook went away")

    log = EventLog()
    with pytest.raises(RuntimeError, match="went away"):
        run_training(
            RunConfig(**SMALL, tensorboard=str(tmp_path)), log=log, progress=fail_in_epoch_two
        )
    board = read_board(only_folder(tmp_path))
    assert_losses_match(board, log)
    assert len(scalars(board, "train/loss")) == 12  # 256 * 0.75 / 32 = 6 steps an epoch
    final = log.scalars("loss")[-1]
    assert scalars(board, "hparam/final_loss") == {final.step: pytest.approx(final.value)}
    assert "test/accuracy" not in board.Tags()["scalars"]


@pytest.mark.integration
def test_a_live_run_is_readable_in_tensorboard_before_it_ends(tmp_path):
    seen_mid_run: list[int] = []

    def read_at_epoch_two(line: str) -> None:
        if "epoch 2/" not in line:
            return
        deadline = time.monotonic() + 10  # the files are flushed every FLUSH_EVERY_S
        # Read until the whole first epoch shows: a flush may come between its steps (the
        # writer also flushes whenever its queue fills, as the memory reports of step 0 do).
        while time.monotonic() < deadline and max(seen_mid_run, default=-1) < 5:
            folders = list(tmp_path.iterdir())
            board = read_board(folders[0]) if folders else None
            if board is not None and "train/loss" in board.Tags()["scalars"]:
                seen_mid_run[:] = sorted(scalars(board, "train/loss"))
            time.sleep(0.2)

    run_training(RunConfig(**SMALL, tensorboard=str(tmp_path)), progress=read_at_epoch_two)
    assert seen_mid_run and max(seen_mid_run) >= 5  # the first epoch, while the run went on
    assert FLUSH_EVERY_S <= 5


@pytest.mark.integration
def test_a_mirrored_run_writes_each_devices_utilization_and_traffic(tmp_path, store_root, capsys):
    flags = ["--strategy", "mirrored", "--devices", "2", "--steps", "12", "--no-calibrate"]
    boards = tmp_path / "boards"
    code = main(["run", *flags, *SMALL_FLAGS, "--tensorboard", str(boards), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    (run,) = RunStore().runs()
    folder = only_folder(boards)
    assert folder.name == run.run_id  # named like its record in the run store
    board = read_board(folder)

    assert_losses_match(board, run.event_log())
    assert scalars(board, "train/loss")[11] == pytest.approx(summary["final_loss"], rel=1e-6)
    assert scalars(board, "test/accuracy") == {11: pytest.approx(summary["test_accuracy"])}
    assert len(summary["per_device"]) == 2
    for device in summary["per_device"]:
        tag = f"device/{device_tag(device['device'])}"
        utilization = scalars(board, f"{tag}/utilization")
        assert sorted(utilization) == list(range(12))
        assert all(0 < value <= 1 for value in utilization.values())
        sent, received = (
            scalars(board, f"{tag}/bytes_sent"),
            scalars(board, f"{tag}/bytes_received"),
        )
        assert sorted(sent) == list(range(12))
        assert sum(sent.values()) == device["bytes_sent"] > 0  # every step's gradients
        assert sum(received.values()) == device["bytes_received"] > 0
    assert "| --strategy | mirrored |" in flags_text(board)
    assert "| --devices | 2 |" in flags_text(board)
    assert hparams_of(board)["devices"] == 2


@pytest.mark.integration
def test_export_writes_a_stored_run_and_refuses_to_write_it_twice(tmp_path, store_root, capsys):
    assert main(["run", "--steps", "20", *SMALL_FLAGS]) == 0
    (run,) = RunStore().runs()
    summary = run.summary()
    capsys.readouterr()

    assert main(["export", "--tensorboard", str(tmp_path / "boards"), run.run_id]) == 0
    assert str(tmp_path / "boards" / run.run_id) in capsys.readouterr().out
    board = read_board(tmp_path / "boards" / run.run_id)
    assert_losses_match(board, run.event_log())
    assert scalars(board, "test/accuracy") == {19: pytest.approx(summary["test_accuracy"])}
    assert scalars(board, "hparam/final_loss") == {19: pytest.approx(summary["final_loss"])}
    assert "| --strategy | one-device |" in flags_text(board)
    # Event times are the run's own: the first loss is stamped within the run's wall time.
    first = board.Scalars("train/loss")[0].wall_time
    assert run.status()["started"] - 60 < first < run.status()["ended"]

    assert main(["export", "--tensorboard", str(tmp_path / "boards"), run.run_id]) == 2
    assert "already holds" in capsys.readouterr().err


@pytest.mark.integration
def test_export_of_an_unknown_run_says_where_runs_are_listed(tmp_path, store_root, capsys):
    assert main(["run", "--steps", "2", *SMALL_FLAGS]) == 0
    (run,) = RunStore().runs()
    capsys.readouterr()
    assert main(["export", "--tensorboard", str(tmp_path), "no-such-run"]) == 2
    error = capsys.readouterr().err
    assert "'no-such-run'" in error and str(store_root) in error
    assert run.run_id in error and "dtrain run prints" in error
    assert list(tmp_path.iterdir()) == [store_root]  # nothing written


def test_export_flags_are_checked(tmp_path, capsys):
    assert main(["export", "some-run"]) == 2
    assert "--tensorboard" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["export", "--help"])
    assert done.value.code == 0
    assert "--tensorboard DIR" in capsys.readouterr().out


def test_a_tensorboard_path_that_is_a_file_is_refused_before_anything_starts(
    tmp_path, store_root, capsys
):
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    for path in (taken, taken / "runs"):
        assert main(["run", "--steps", "2", "--tensorboard", str(path)]) == 2
        error = capsys.readouterr().err
        assert "--tensorboard" in error and "not a directory" in error
    assert RunStore().runs() == []  # refused before the run was recorded
    assert taken.read_text() == "mine"
