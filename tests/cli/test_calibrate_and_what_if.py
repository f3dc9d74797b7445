"""``dtrain calibrate`` times the local cluster and caches it; ``dtrain plan --what-if`` on the
live cluster ranks every strategy from that calibration."""

import json

import pytest

from workbench.cli.main import main

pytestmark = pytest.mark.integration

SMALL = ["--dataset", "synthetic:32:4:512", "--hidden", "32,32", "--batch-size", "64"]


def test_calibrate_then_what_if_on_the_local_cluster(capsys, store_root):
    assert main(["calibrate", "--devices", "2", *SMALL, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["devices"] == 2 and summary["op_signatures"] > 0
    assert summary["dispatch_ms"] > 0
    cached = list((store_root / "calibrations").glob("*.json"))
    assert len(cached) == 2  # the cluster's, and this process's for one-device rows
    # The collectives the data-parallel rows' runs time at their start are timed too: such a
    # run finds them cached and reports its row's step.
    timed = {
        key.split(" over ")[0]
        for path in cached
        for key in json.loads(path.read_text())["collectives"]
    }
    assert timed == {"ring", "hierarchical-copy", "reduce-to-one", "reduce", "broadcast"}

    assert main(["plan", "--what-if", "--devices", "2", *SMALL, "--json"]) == 0
    out, err = capsys.readouterr()
    assert "nothing measured" in err and "timing" not in err  # no cluster, nothing timed
    printed = json.loads(out)
    assert printed["source"].startswith("calibrated on 2 local devices")
    rows = printed["configurations"]
    predicted = [row for row in rows if row["predicted_step_ms"] is not None]
    assert predicted[0]["reason"] == "fastest"
    steps = [row["predicted_step_ms"] for row in predicted]
    assert steps == sorted(steps)
    assert {row["strategy"] for row in predicted} == {
        "one-device",
        "mirrored",
        "sharded",
        "central-storage",
        "parameter-server",
        "model-parallel",
        "pipeline",
        "mesh",
    }
