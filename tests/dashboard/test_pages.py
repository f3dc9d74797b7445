"""The dashboard pages over a run board, without a server: what each page shows, and how it
follows the newest run."""

from bokeh.document import Document

from workbench.dashboard.pages import NO_RUN, REFRESH_MILLISECONDS, STEP_CSS_CLASS, show_page
from workbench.dashboard.preload import PAGE_FIGURES
from workbench.dashboard.publisher import PUBLISH_HZ
from workbench.dashboard.run_board import RunBoard
from workbench.dashboard.wire_rows import event_rows
from workbench.events.records import PhaseEvent, ScalarEvent

DESCRIPTION = {"strategy": "mirrored", "devices": ["/task:0", "/task:1"], "batch_size": 32}


def events(steps: range) -> list[tuple]:
    found = []
    for step in steps:
        for rank in (0, 1):
            start = 0.1 * step
            found.append(PhaseEvent(f"/task:{rank}", "compute", step, start, start + 0.06))
            found.append(PhaseEvent(f"/task:{rank}", "allreduce", step, start + 0.06, start + 0.09))
        found.append(ScalarEvent("loss", step, 2.0 - 0.01 * step, 0.1 * step + 0.09))
    return event_rows(found)


def test_every_page_shows_its_two_figures_titled_no_run_before_any_run():
    for figure_names in PAGE_FIGURES.values():
        document = Document()
        page = show_page(figure_names, RunBoard(), document)
        assert document.roots == [page.root]
        assert page.root.children == [page.step_line, *page.figures]
        assert page.step_line.css_classes == [STEP_CSS_CLASS]
        assert len(page.figures) == 2
        assert all(chart.title.text.endswith(f" — {NO_RUN}") for chart in page.figures)
        assert REFRESH_MILLISECONDS >= 100  # at most 10 refreshes a second


def test_a_page_draws_what_arrives_and_says_when_the_run_ended():
    board = RunBoard()
    page = show_page(PAGE_FIGURES["/individual-workbench-loss"], board, Document())
    board.publish("run-1", events(range(5)), DESCRIPTION)
    page.tick()
    assert list(page.charts.sources["loss"].data["step"]) == [0, 1, 2, 3, 4]
    assert page.figures[0].title.text == "loss — mirrored, 2 devices, run run-1 (live)"
    board.publish("run-1", events(range(5, 8)), finished=True)
    page.tick()
    assert list(page.charts.sources["loss"].data["step"]) == list(range(8))
    assert page.figures[1].title.text.endswith("run run-1 (finished)")


def test_the_utilization_and_timeline_pages_show_every_device():
    board = RunBoard()
    board.publish("run-1", events(range(3)), DESCRIPTION)
    utilization = show_page(PAGE_FIGURES["/individual-workbench-utilization"], board, Document())
    timeline = show_page(PAGE_FIGURES["/individual-workbench-timeline"], board, Document())
    assert utilization.charts.sources["traffic"].data["device"] == ["/task:0", "/task:1"]
    assert len(timeline.charts.sources["timeline"].data["phase"]) == 12
    assert timeline.charts.sources["stragglers"].data["device"] == ["/task:0", "/task:1"]


def test_a_page_moves_to_a_newer_run():
    board = RunBoard()
    board.publish("run-1", events(range(5)), DESCRIPTION)
    page = show_page(PAGE_FIGURES["/individual-workbench-loss"], board, Document())
    board.publish("run-2", events(range(2)), {**DESCRIPTION, "strategy": "parameter-server"})
    page.tick()
    assert page.run_id == "run-2"
    assert list(page.charts.sources["loss"].data["step"]) == [0, 1]
    assert page.root.children == [page.step_line, *page.figures]
    assert "parameter-server" in page.figures[0].title.text


def test_a_page_builds_only_its_own_figures():
    page = show_page(PAGE_FIGURES["/individual-workbench-timeline"], RunBoard(), Document())
    assert list(page.charts.figures) == ["timeline", "stragglers"]


def test_a_page_pinned_to_a_run_stays_on_it_when_a_newer_run_starts():
    board = RunBoard()
    page = show_page(PAGE_FIGURES["/individual-workbench-loss"], board, Document(), "run-1")
    assert page.run_id is None and "no run run-1" in page.figures[0].title.text
    board.publish("run-1", events(range(5)), DESCRIPTION)
    page.tick()
    board.publish("run-2", events(range(2)), {**DESCRIPTION, "strategy": "parameter-server"})
    page.tick()
    assert page.run_id == "run-1"
    assert list(page.charts.sources["loss"].data["step"]) == [0, 1, 2, 3, 4]


def test_every_page_says_how_far_its_run_is_as_it_refreshes():
    for figure_names in PAGE_FIGURES.values():
        board = RunBoard()
        page = show_page(figure_names, board, Document())
        assert page.step_line.text == "step 0/?"
        board.publish("run-1", events(range(3)), {**DESCRIPTION, "steps": 8})
        page.tick()
        assert page.step_line.text == "step 3/8"
        board.publish("run-1", events(range(3, 8)), finished=True)
        page.tick()
        assert page.step_line.text == "step 8/8"
    # A step the devices finished reaches the page within a second: the publisher's period
    # plus the page's.
    assert 1000 / PUBLISH_HZ + REFRESH_MILLISECONDS < 1000
