"""The planner suite's mesh part: its configurations are runs the mesh strategy takes, its
result judges the share within 20% and each device count's top pick from the runs' figures,
and ``--meshes`` on the planner suite runs it (no cluster here: the runs are given)."""

import contextlib
import io
import json

import pytest

from benchmarks import machine, planner_suite
from benchmarks import mesh_planner_suite as suite
from benchmarks.command import bench_command
from workbench.events import Phase, PhaseEvent
from workbench.models import build_model
from workbench.strategies.registry import STRATEGIES
from workbench.strategies.validation import validate_config

SETTINGS = {"batch_size": 256, "steps": 30, "repeats": 2, "seed": 0}
# Four configurations on 2 devices and three on 4; each (predicted, measured) per repeat.
CONFIGURATIONS = (
    {"devices": 2, "mesh": "dp=2,tp=1,pp=1", "schedule": "1f1b", "microbatches": 1},
    {"devices": 2, "mesh": "dp=1,tp=2,pp=1", "schedule": "1f1b", "microbatches": 1},
    {"devices": 2, "mesh": "dp=1,tp=1,pp=2", "schedule": "gpipe", "microbatches": 4},
    {
        "devices": 2,
        "mesh": "dp=1,tp=1,pp=2",
        "schedule": "interleaved-1f1b",
        "microbatches": 4,
        "virtual_stages": 2,
    },
    {"devices": 4, "mesh": "dp=4,tp=1,pp=1", "schedule": "1f1b", "microbatches": 1},
    {"devices": 4, "mesh": "dp=2,tp=2,pp=1", "schedule": "1f1b", "microbatches": 1},
    {"devices": 4, "mesh": "dp=1,tp=1,pp=4", "schedule": "zero-bubble", "microbatches": 4},
)
RUNS = {
    # 2 devices, measured order: dp=2 (10), tp=2 (11), gpipe (20), interleaved (30). The
    # planner predicts gpipe fastest (measured #3: not among the best two).
    0: [(12.0, 9.0), (12.0, 11.0)],  # +20% exactly: within
    1: [(13.0, 11.0), (13.0, 11.0)],  # +18%
    2: [(9.0, 20.0), (9.0, 20.0)],  # -55%
    3: [(31.0, 30.0), (29.0, 30.0)],  # +0%
    # 4 devices, measured order: tp=2 (40), dp=4 (50), pp=4 (60). The planner picks dp=4
    # (measured #2: among the best two).
    4: [(45.0, 50.0), (45.0, 50.0)],  # -10%
    5: [(60.0, 40.0), (60.0, 40.0)],  # +50%
    6: [(61.0, 60.0), (61.0, 60.0)],  # +2%
}


def _summary(runs: dict = RUNS) -> dict:
    given = {
        index: [{"predicted": p, "measured": m} for p, m in results]
        for index, results in runs.items()
    }
    return suite.summarize(SETTINGS, CONFIGURATIONS, given)


def test_at_least_15_distinct_configurations_on_2_to_4_devices_that_the_mesh_takes():
    keys = {
        (c["devices"], c["mesh"], c["schedule"], c["microbatches"], c.get("virtual_stages"))
        for c in suite.CONFIGURATIONS
    }
    assert len(keys) == len(suite.CONFIGURATIONS) >= 15
    assert {c["devices"] for c in suite.CONFIGURATIONS} == {2, 4}
    schedules = {c["schedule"] for c in suite.CONFIGURATIONS if not c["mesh"].endswith("pp=1")}
    assert schedules == {"gpipe", "1f1b", "interleaved-1f1b", "zero-bubble"}
    meshes = {c["mesh"] for c in suite.CONFIGURATIONS}
    assert {"dp=2,tp=2,pp=1", "dp=2,tp=1,pp=2", "dp=1,tp=2,pp=2", "dp=1,tp=1,pp=4"} <= meshes
    model = build_model("mlp", (784,), 10, suite.MODEL["hidden"])
    settings = suite.MeshPlannerSettings(steps=30)
    for configuration in suite.CONFIGURATIONS:
        config = validate_config(suite.run_config(settings, configuration))
        STRATEGIES["mesh"].check_model(config, model)  # raises ConfigError if refused


def test_the_result_judges_the_share_within_20_percent():
    result = _summary()
    errors = [row["error"] for row in result["rows"]]
    assert errors == pytest.approx([0.2, 2 / 11, -0.55, 0.0, -0.1, 0.5, 1 / 60])
    assert [row["within_close"] for row in result["rows"]] == [
        True,
        True,
        False,
        True,
        True,
        False,
        True,
    ]
    assert result["share_within_close"] == pytest.approx(5 / 7)
    assert result["share_met"] is False  # 71% < 80%


def test_each_device_count_ranks_by_prediction_and_judges_its_top_pick():
    result = _summary()
    two, four = result["rankings"]
    assert two["devices"] == 2 and four["devices"] == 4
    assert two["predicted_order"][0] == "dp=1,tp=1,pp=2 gpipe M=4"
    assert two["measured_order"] == [
        "dp=2,tp=1,pp=1",
        "dp=1,tp=2,pp=1",
        "dp=1,tp=1,pp=2 gpipe M=4",
        "dp=1,tp=1,pp=2 interleaved-1f1b M=4 V=2",
    ]
    assert (two["pick_measured_rank"], two["met"]) == (3, False)
    assert (four["pick"], four["pick_measured_rank"], four["met"]) == ("dp=4,tp=1,pp=1", 2, True)
    ranks = [(row["predicted_rank"], row["measured_rank"]) for row in result["rows"]]
    assert ranks == [(2, 1), (3, 2), (1, 3), (4, 4), (1, 2), (2, 1), (3, 3)]
    assert result["picks_met"] is False and result["met"] is False


def test_both_targets_met_when_the_pick_is_the_fastest_and_every_row_is_close():
    runs = {index: [(m, m) for _, m in results] for index, results in RUNS.items()}
    result = _summary(runs)
    assert result["share_within_close"] == 1.0
    assert all(ranking["pick_measured_rank"] == 1 for ranking in result["rankings"])
    assert result["met"] is True


def test_the_report_shows_the_table_the_share_and_the_picks():
    text = suite.render(_summary())
    assert (
        "| 2 | dp=1,tp=1,pp=2 gpipe M=4 | 9.00 | 20.00 (20.00 - 20.00) | -55% (>20%) | 1 | 3 |"
        in (text)
    )
    assert "- within 20%: 5 of 7 configurations (71%; target 80%): NOT met" in text
    assert "- 2 devices: the planner's pick dp=1,tp=1,pp=2 gpipe M=4 is measured #3 of 4" in text
    assert "- 4 devices: the planner's pick dp=4,tp=1,pp=1 is measured #2 of 3" in text


def test_the_measured_phases_are_per_device_and_steady_step_and_shown_beside_the_step():
    # 2 devices, 11 steps (the first is warm-up): each steady step device a computes 2 ms
    # in two pieces and sends 1 ms; device b receives 3 ms; the warm-up step's 50 ms is left out.
    events = [PhaseEvent("a", Phase.COMPUTE, 0, 0.0, 0.05), PhaseEvent("b", Phase.RECV, 0, 0, 0.05)]
    for step in range(1, 11):
        events += [
            PhaseEvent("a", Phase.COMPUTE, step, 0.0, 0.001),
            PhaseEvent("a", Phase.COMPUTE, step, 0.002, 0.003),
            PhaseEvent("a", Phase.SEND, step, 0.001, 0.002),
            PhaseEvent("b", Phase.RECV, step, 0.0, 0.003),
        ]
    phases = suite.phases_ms(events)
    assert phases == pytest.approx(
        {"compute": 1.0, "all-reduce": 0.0, "hand-offs": 2.0, "update": 0.0}
    )
    runs = {
        index: [{"predicted": p, "measured": m, "phases": phases} for p, m in results]
        for index, results in RUNS.items()
    }
    result = suite.summarize(SETTINGS, CONFIGURATIONS, runs)
    assert result["rows"][0]["phases_ms"] == pytest.approx(phases)
    text = suite.render(result)
    assert "| devices | mesh, schedule | measured step ms | compute ms | all-reduce ms |" in text
    assert "| 2 | dp=2,tp=1,pp=1 | 10.00 | 1.00 | 0.00 | 2.00 | 0.00 |" in text


def test_the_planner_suite_runs_and_renders_the_mesh_part_with_meshes(monkeypatch):
    seen = []

    def runs(settings, progress):
        seen.append(settings)
        return _summary()

    monkeypatch.setattr(suite, "run_mesh_planner_suite", runs)
    monkeypatch.setattr(machine, "describe_machine", dict)  # it would run uname
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        argv = ["planner", "--meshes", "--train-steps", "30", "--repeats", "2", "--json"]
        assert bench_command(argv) == 0
    assert seen == [suite.MeshPlannerSettings(steps=30, repeats=2)]
    result = json.loads(buffer.getvalue())["suites"]["planner"]
    assert result["part"] == "meshes"
    assert planner_suite.render(result).startswith("### planner: mesh configurations")
