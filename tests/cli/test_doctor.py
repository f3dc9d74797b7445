"""``dtrain doctor``: a machine without a GPU checks the CPU path and passes; GPUs (the CuPy
double) get their rows and an NCCL run; one GPU is shared by itself; a bad flag exits 2 before
anything starts."""

import json

import pytest

from tests.parallel.conftest import no_leftover_processes  # noqa: F401 (a fixture)
from workbench.cli import doctor_command
from workbench.cli.main import main
from workbench.launch import doctor as doctor_module
from workbench.runtime.gpu_runtime import missing_gpu_reason


def doctor(capsys, *flags):
    code = main(["doctor", *flags])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def runs_by_label(report: dict) -> dict:
    return {run["label"]: run for run in report["runs"]}


@pytest.mark.integration
@pytest.mark.usefixtures("no_leftover_processes")
def test_a_machine_without_a_gpu_checks_the_cpu_path(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU here, even on a GPU machine
    code, out, err = doctor(capsys, "--json", "--strategies", "one-device,mirrored")
    assert code == 0, err
    report = json.loads(out)
    assert report["ok"] is True
    reason = missing_gpu_reason()
    assert report["gpu"]["available"] is False and report["gpu"]["reason"] == reason
    assert report["gpu"]["device_type"] == "cpu"
    (gpu_row,) = [row for row in report["checks"] if row["check"] == "GPU"]
    assert gpu_row["status"] == "ok"
    assert gpu_row["note"] == f"no GPU: {reason}; checking the CPU path"
    assert report["machine"]["numpy"] and report["machine"]["distributed"]
    assert [worker["gpu"] for worker in report["workers"]] == [False, False]
    runs = runs_by_label(report)
    assert list(runs) == ["one-device", "mirrored"]
    assert all(run["status"] == "pass" and run["device_type"] == "cpu" for run in runs.values())
    assert runs["mirrored"]["parameters_match"] is True
    assert runs["mirrored"]["largest_difference"] <= 1e-9
    assert "[doctor] mirrored" in err  # progress on stderr, the report alone on stdout


@pytest.mark.integration
@pytest.mark.gpu_path
@pytest.mark.usefixtures("cpu_double_gpus", "no_leftover_processes")
def test_gpus_are_reported_and_every_run_trains_on_them(capsys):
    code, out, err = doctor(capsys, "--json", "--strategies", "mirrored")
    assert code == 0, err
    report = json.loads(out)
    gpu = report["gpu"]
    assert gpu["available"] is True and gpu["runtime"] == "cupy-cpu-double"
    assert gpu["count"] == 4 and gpu["identity"].startswith("GPU-")
    assert gpu["nccl_available"] is True and gpu["versions"]["nccl"] == "2.27.7"
    assert gpu["device_type"] == "gpu" and gpu["share_gpu"] is False
    identities = [worker["gpu_identity"] for worker in report["workers"]]
    assert len(set(identities)) == 2  # a GPU each
    runs = runs_by_label(report)
    assert list(runs) == ["one-device", "mirrored", "mirrored (nccl)"]
    assert runs["mirrored (nccl)"]["options"] == {"allreduce": "nccl"}
    for run in runs.values():
        assert run["status"] == "pass" and run["device_type"] == "gpu", run
    assert runs["mirrored (nccl)"]["parameters_match"] is True


@pytest.mark.integration
@pytest.mark.gpu_path
@pytest.mark.usefixtures("no_leftover_processes")
def test_one_gpu_is_shared_by_itself_and_nccl_is_skipped(capsys, cpu_double_gpus):
    cpu_double_gpus.setenv("DTRAIN_FAKE_GPUS", "1")
    code, out, err = doctor(capsys, "--strategies", "mirrored")
    assert code == 0, err
    lines = {line.split("  ")[0]: line for line in out.splitlines() if line}
    assert "2 devices on 1 GPU(s); --share-gpu set automatically" in lines["device type"]
    assert "shares its GPU with another worker (--share-gpu)" in lines["worker 1"]
    assert " ok " in lines["worker 1"]
    assert lines["mirrored"].split()[1:4] == ["2", "gpu", "pass"]
    assert "match" in lines["mirrored"]
    assert "skip" in lines["mirrored (nccl)"] and "NCCL refuses" in lines["mirrored (nccl)"]
    assert out.rstrip().endswith("dtrain doctor: every check passed")


@pytest.mark.parametrize(
    ("flags", "field", "allowed"),
    [
        (["--device-type", "tpu"], "--device-type", "auto, cpu, gpu"),
        (["--strategies", "mirrored,warp-drive"], "--strategies", "one-device, mirrored"),
        (["--devices", "0"], "--devices", ">= 1"),
        (["--share-gpu", "--device-type", "cpu"], "--share-gpu", "no"),
        (["--warp"], "--warp", "unknown flag"),
    ],
)
def test_a_bad_flag_exits_2_before_anything_starts(capsys, monkeypatch, flags, field, allowed):
    def refuse(*arguments):
        raise AssertionError("run_doctor started despite a bad flag")

    monkeypatch.setattr(doctor_command, "run_doctor", refuse)
    code, out, err = doctor(capsys, *flags)
    assert code == 2
    assert out == ""
    assert err.startswith(f"dtrain doctor: error: {field}") and allowed in err


@pytest.mark.integration
def test_a_failed_smoke_run_exits_1_with_its_reason_in_one_line(capsys, monkeypatch):
    def broken(config, progress):
        raise RuntimeError("the device fell over\n(a long traceback)")

    monkeypatch.setattr(doctor_module, "run_training", broken)
    code, out, err = doctor(capsys, "--strategies", "one-device")
    assert code == 1, err
    (line,) = [line for line in out.splitlines() if line.startswith("one-device")]
    assert line.split()[3] == "fail" and line.endswith("the device fell over")
    assert out.rstrip().endswith("dtrain doctor: a check or a smoke run FAILED")
