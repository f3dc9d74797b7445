"""``dtrain run``: the JSON contract, progress on stderr, and clear errors before any work."""

import json
import shutil
import subprocess
import sys

import pytest

from workbench.cli.main import main

JSON_KEYS = {
    "strategy",
    "devices",
    "steps",
    "global_batch_size",
    "final_loss",
    "test_accuracy",
    "samples_per_second",
    "wall_seconds",
    "bytes_communicated",
    "per_device",
}


def run_json(capsys, *flags):
    code = main(["run", *flags, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out), captured.err


@pytest.mark.integration
def test_json_summary_has_the_contract_keys_and_progress_goes_to_stderr(capsys):
    summary, err = run_json(capsys, "--steps", "30", "--hidden", "32")
    assert set(summary) >= JSON_KEYS
    assert summary["strategy"] == "one-device" and summary["devices"] == 1
    assert summary["steps"] == 30 and summary["global_batch_size"] == 32
    assert summary["samples_per_second"] > 0 and summary["wall_seconds"] > 0
    assert summary["bytes_communicated"] == 0
    (device,) = summary["per_device"]
    assert {"busy_fraction", "bytes_sent", "bytes_received"} <= set(device)
    assert 0 < device["busy_fraction"] <= 1
    assert "loss" in err and "test accuracy" in err


@pytest.mark.parametrize(
    ("flags", "field", "allowed"),
    [
        (["--strategy", "warp-drive"], "--strategy", "one-device"),
        (["--optimizer", "rmsprop"], "--optimizer", "sgd, momentum, adam"),
        (["--model", "resnet"], "--model", "mlp, cnn"),
        (["--dtype", "int8"], "--dtype", "float32, float64"),
        (["--allreduce", "tree"], "--allreduce", "ring, hierarchical-copy, reduce-to-one"),
        (["--schedule", "zigzag"], "--schedule", "gpipe, 1f1b"),
        (["--mode", "eventual"], "--mode", "sync, async"),
        (["--device-type", "tpu"], "--device-type", "auto, cpu, gpu"),
        (["--dataset", "imagenet"], "--dataset", "mnist:PATH"),
        (["--devices", "2"], "--devices", "exactly 1"),
        (["--devices", "0"], "--devices", ">= 1"),
        (["--batch-size", "0"], "--batch-size", ">= 1"),
        (["--batch-size", "5000"], "--batch-size", "batch"),
        (["--staleness", "-1", "--mode", "async"], "--staleness", ">= 0"),
        (["--staleness", "2"], "--staleness", "--mode async"),
        (["--ps", "0"], "--ps", ">= 1"),
        (["--epochs", "2", "--steps", "3"], "--epochs", "not both"),
        (["--lr", "-0.1"], "--lr", "> 0"),
        (["--hidden", "12,x"], "--hidden", "comma-separated"),
        (["--devices", "two"], "--devices", "invalid int"),
        (["--warp", "9"], "--warp", "unknown flag"),
        (["--seeds", "9"], "--seeds", "did you mean --seed?"),
        (["--dataset", "mnist:/no/such/dir"], "mnist", "/no/such/dir"),
    ],
)
def test_bad_flags_exit_2_naming_the_field_and_choices(capsys, flags, field, allowed):
    code = main(["run", *flags, "--json"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""  # no half-made summary
    assert field in captured.err and allowed in captured.err
    assert "Traceback" not in captured.err


def test_bad_save_directory_is_refused_before_training(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    code = main(["run", "--steps", "2", "--save", str(tmp_path)])
    assert code == 2
    assert "--save" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.integration
def test_console_script_runs_end_to_end(tmp_path):
    script = shutil.which("dtrain") or str(sys.executable).replace("python", "dtrain")
    done = subprocess.run(
        [script, "run", "--steps", "5", "--hidden", "16", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"] == 5


@pytest.mark.integration
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_ten_epochs_on_digits_reach_97_percent(capsys, model):
    summary, _ = run_json(
        capsys,
        "--strategy",
        "one-device",
        "--model",
        model,
        "--dataset",
        "digits",
        "--epochs",
        "10",
    )
    assert summary["test_accuracy"] >= 0.97


@pytest.mark.parametrize(
    ("flags", "field", "fragment"),
    [
        (["--strategy", "mirrored", "--devices", "3"], "--batch-size", "divide evenly"),
        (["--strategy", "mirrored", "--allreduce", "tree"], "--allreduce", "ring"),
        (["--strategy", "parameter-server", "--ps", "0"], "--ps", ">= 1"),
        (
            ["--strategy", "multi-worker-mirrored", "--devices", "2", "--hosts", "4"],
            "--hosts",
            "at least as many devices",
        ),
        (["--cluster", "tcp://127.0.0.1:9"], "--cluster", "one-device runs in this process"),
        (["--checkpoint-every", "0"], "--checkpoint-every", ">= 1"),
        (["--max-restarts", "-1"], "--max-restarts", ">= 0"),
        (
            ["--strategy", "parameter-server", "--devices", "2", "--backup-workers", "2"],
            "--backup-workers",
            "choose 0 to 1",
        ),
        (["--strategy", "pipeline", "--devices", "2", "--elastic"], "--elastic", "mirrored"),
        (
            ["--strategy", "parameter-server", "--ps-partition-min-bytes", "-1"],
            "--ps-partition-min-bytes",
            ">= 0",
        ),
        (
            ["--strategy", "pipeline", "--devices", "2", "--replication", "in-graph"],
            "--replication",
            "mirrored, central-storage, parameter-server",
        ),
        (
            ["--strategy", "mirrored", "--replication", "in-graph", "--allreduce", "reduce-to-one"],
            "--allreduce",
            "in-graph",
        ),
        (
            ["--strategy", "mirrored", "--replication", "in-graph", "--compression", "fp16"],
            "--compression",
            "in-graph",
        ),
        (
            ["--strategy", "mirrored", "--devices", "2", "--simulate-straggler", "task:2=3"],
            "--simulate-straggler",
            "task:0, task:1",
        ),
        (
            [
                "--strategy",
                "mirrored",
                "--devices",
                "2",
                "--cluster",
                "tcp://127.0.0.1:9",
                "--steps",
                "1",
            ],
            "--cluster",
            "cannot reach",
        ),
    ],
)
def test_distributed_configuration_errors_before_any_task(capsys, flags, field, fragment):
    code = main(["run", *flags])
    err = capsys.readouterr().err
    assert code == 2
    assert field in err and fragment in err


def test_more_stages_than_layers_is_refused_before_the_cluster(capsys):
    code = main(
        [
            "run",
            "--strategy",
            "pipeline",
            "--devices",
            "5",
            "--stages",
            "5",
            "--hidden",
            "16",
            "--microbatches",
            "2",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--stages" in err and "the model has 3" in err


def test_batch_not_divisible_by_microbatches_is_refused(capsys):
    code = main(["run", "--strategy", "pipeline", "--devices", "2", "--microbatches", "5"])
    err = capsys.readouterr().err
    assert code == 2 and "--microbatches" in err and "divide evenly" in err


def test_plan_shows_the_parameter_server_graph_with_shards_and_parts(capsys):
    flags = ["--devices", "2", "--ps", "2", "--hidden", "32", "--ps-partition-min-bytes", "4096"]
    assert main(["plan", "--strategy", "parameter-server", *flags]) == 0
    out = capsys.readouterr().out
    assert "dense_0/kernel/part_0" in out and "dense_0/kernel/part_1" in out
    assert "/job:ps/task:1/device:CPU:0" in out and "pulls shard->worker" in out


def test_plan_in_graph_shows_one_tower_per_device(capsys):
    flags = ["--strategy", "mirrored", "--replication", "in-graph", "--devices", "4"]
    assert main(["plan", *flags, "--hidden", "32"]) == 0
    out = capsys.readouterr().out
    assert all(f"tower_{i}" in out for i in range(4)) and "1 all-reduce" in out


def test_plan_of_a_strategy_without_a_client_graph_names_those_with_one(capsys):
    assert main(["plan", "--strategy", "pipeline", "--devices", "2"]) == 2
    err = capsys.readouterr().err
    assert "--strategy" in err and "--replication in-graph" in err


@pytest.mark.integration
def test_plan_prints_placement_partitions_and_send_recv_pairs(capsys):
    assert main(["plan", "--strategy", "model-parallel", "--devices", "2", "--hidden", "32"]) == 0
    out = capsys.readouterr().out
    assert "dense_0" in out and "/job:worker/task:1/device:CPU:0" in out
    assert "send" in out and "recv" in out and "->" in out


@pytest.mark.integration
def test_a_command_line_run_is_recorded_in_the_run_store(tmp_path, monkeypatch, capsys):
    from workbench.store import STORE_ENVIRONMENT, RunStore

    monkeypatch.setenv(STORE_ENVIRONMENT, str(tmp_path))
    summary, err = run_json(capsys, "--steps", "4", "--hidden", "16")
    (stored,) = RunStore(tmp_path).runs()
    assert f"run {stored.run_id}, recorded in {tmp_path}" in err
    assert stored.status()["state"] == "finished" and stored.status()["step"] == 4
    assert stored.summary()["final_loss"] == summary["final_loss"]
    assert stored.config()["steps"] == 4
    assert any(event.name == "test_loss" for event in stored.events() if hasattr(event, "name"))


def test_bad_flags_record_nothing(tmp_path, monkeypatch, capsys):
    from workbench.store import STORE_ENVIRONMENT, RunStore

    monkeypatch.setenv(STORE_ENVIRONMENT, str(tmp_path))
    assert main(["run", "--strategy", "ring", "--json"]) == 2
    assert RunStore(tmp_path).runs() == []


@pytest.mark.integration
def test_a_stop_asked_through_the_store_ends_a_command_line_run(tmp_path):
    """What the JupyterLab sidebar's Stop does to a ``dtrain run`` in a terminal."""
    import os
    import time

    from workbench.store import STORE_ENVIRONMENT, RunStore

    script = shutil.which("dtrain") or str(sys.executable).replace("python", "dtrain")
    process = subprocess.Popen(
        [script, "run", "--steps", "1000000", "--hidden", "16", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, STORE_ENVIRONMENT: str(tmp_path)},
    )
    try:
        deadline = time.monotonic() + 60
        while not RunStore(tmp_path).runs() or RunStore(tmp_path).runs()[0].status()["step"] < 5:
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.1)
        (stored,) = RunStore(tmp_path).runs()
        stored.request_stop()
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert 5 <= json.loads(out)["steps"] < 1_000_000
    assert stored.status()["state"] == "stopped"


@pytest.mark.integration
def test_a_cluster_run_checkpoints_into_its_run_directory(tmp_path, monkeypatch, capsys):
    from workbench.store import STORE_ENVIRONMENT, RunStore

    monkeypatch.setenv(STORE_ENVIRONMENT, str(tmp_path))
    summary, _ = run_json(
        capsys,
        "--strategy",
        "mirrored",
        "--devices",
        "2",
        "--steps",
        "65",
        "--hidden",
        "16",
        "--checkpoint-every",
        "20",
    )
    (stored,) = RunStore(tmp_path).runs()
    kept = sorted(path.name for path in (stored.path / "checkpoints").iterdir())
    assert kept == ["step-00000040", "step-00000060"]
    assert summary["restarts"] == 0 and summary["steps_recomputed"] == 0
    assert summary["recovery_seconds"] == []
