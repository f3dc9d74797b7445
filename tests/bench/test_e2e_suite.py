"""The e2e suite times whole commands as a user runs them and cancels their start-up out."""

from __future__ import annotations

import pytest

from benchmarks.e2e_suite import E2ESettings, command, render, run_e2e_suite


def test_the_commands_are_the_ones_a_user_types():
    settings = E2ESettings()
    mirrored = command("mirrored", 100, settings)
    assert mirrored[mirrored.index("run") :][:5] == [
        "run",
        "--strategy",
        "mirrored",
        "--devices",
        "2",
    ]
    assert "--steps" in mirrored and mirrored[mirrored.index("--steps") + 1] == "100"
    ddp = command("ddp", 1100, settings)
    assert ddp[1:3] == ["-m", "benchmarks.ddp_script"] and "1100" in ddp
    assert settings.chosen() == ("mirrored", "ddp")
    overheads = E2ESettings(overheads=True).chosen()
    assert {"one-device", "parameter-server", "pipeline", "pipeline-1f1b"} <= set(overheads)
    one_f_one_b = command("pipeline-1f1b", 100, settings)
    assert one_f_one_b[one_f_one_b.index("--schedule") + 1] == "1f1b"
    peer = command("torch-pipeline-1f1b", 1100, settings)
    assert peer[1:3] == ["-m", "benchmarks.pipeline_script"]
    assert peer[peer.index("--schedule") + 1] == "1f1b" and "1100" in peer
    server = command("torch-ps-async", 100, settings)
    assert server[1:3] == ["-m", "benchmarks.ps_script"]
    assert server[server.index("--mode") + 1] == "async"
    ours = command("parameter-server-async", 100, settings)
    assert ours[ours.index("--mode") + 1] == "async"


@pytest.mark.integration
def test_a_trial_reports_throughput_from_the_difference_of_two_whole_runs():
    settings = E2ESettings(
        short=2, long=12, trials=1, batch_size=32, contenders=("one-device",), profile=False
    )
    lines: list[str] = []
    result = run_e2e_suite(settings, lines.append)
    walls = result["wall_seconds"]["one-device"]
    difference = walls["12"]["median"] - walls["2"]["median"]
    assert result["samples_per_second"]["one-device"]["median"] == 10 * 32 / difference
    assert result["ratios"] == {}  # its peers were not run
    assert len(lines) == 2 and "| one-device |" in render(result)
