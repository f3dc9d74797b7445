"""``%dtrain compare``: strategies one after another on the same data and steps, with the
figures that tell them apart and a live loss view per strategy."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError


@pytest.mark.integration
def test_compare_runs_each_strategy_and_tabulates_their_figures(shell):
    comparison = shell.run_line_magic(
        "dtrain", "compare mirrored,parameter-server --devices 2 --steps 5 --hidden 16 -o cmp"
    )
    assert shell.user_ns["cmp"] is comparison
    view = comparison.view()
    comparison.wait(300)
    view.updater.join(30)
    rows = comparison.rows()
    assert [row["strategy"] for row in rows] == ["mirrored", "parameter-server"]
    for row in rows:
        assert row["state"] == "finished" and row["steps"] == 5
        assert row["samples_per_second"] > 0 and row["bytes_communicated"] > 0
        assert 0 < row["busy_fraction"] <= 1
    # The two ran one after another, not at once.
    first, second = comparison.runs
    assert second.started >= first.started + first.summary["wall_seconds"] * 0.5
    assert [list(source.data["step"]) for source in view.sources] == [list(range(5))] * 2
    assert "parameter-server" in view.table.value and "samples/s" in view.table.value


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("compare", "--strategy"),
        ("compare --devices 2", "--strategy"),
        ("compare mirrored,warp --devices 2", "unknown strategy 'warp'"),
        ("compare mirrored,pipeline --devices 2 --strategy one-device", "first argument"),
        ("compare mirrored,pipeline --devices 3", "--devices"),
    ],
)
def test_a_malformed_comparison_starts_nothing(shell, line, expected):
    magics = shell.magics_manager.registry["WorkbenchMagics"]
    with pytest.raises(UsageError, match=expected):
        shell.run_line_magic("dtrain", line)
    assert not magics.runs.all()


@pytest.mark.integration
def test_finished_runs_are_compared_from_the_store(shell, store_root):
    from workbench.notebook.compare import compare_stored
    from workbench.store import RunStore

    first = shell.run_line_magic("dtrain", "--steps 4 --hidden 8 --wait")
    second = shell.run_line_magic("dtrain", "--steps 6 --hidden 8 --optimizer sgd --wait")
    ids = [run.run_id for run in RunStore(store_root).runs()]
    assert len(ids) == 2 and first["steps"] == 4 and second["steps"] == 6
    comparison = compare_stored([ids[0], ids[1][:-2]], store=RunStore(store_root))
    assert [row["steps"] for row in comparison.rows()] == [4, 6]
    assert [row["state"] for row in comparison.rows()] == ["finished", "finished"]
    assert comparison.rows()[1]["final_loss"] == second["final_loss"]
    view = comparison.view()
    view.updater.join(30)
    assert [len(source.data["step"]) for source in view.sources] == [4, 6]
    with pytest.raises(KeyError, match="matches no stored run"):
        compare_stored(["nope"], store=RunStore(store_root))
