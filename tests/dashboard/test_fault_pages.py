"""The scheduler dashboard's timeline page shows a run's faults as the notebook does: the
published events' failures, recoveries and dropped pushes fill the timeline's fault sources."""

from bokeh.document import Document

from tests.fault_events import FAILED_DEVICE, fault_run
from workbench.dashboard.pages import show_page
from workbench.dashboard.preload import PAGE_FIGURES
from workbench.dashboard.run_board import RunBoard
from workbench.dashboard.wire_rows import event_rows

DESCRIPTION = {"strategy": "parameter-server", "devices": ["/task:0", "/task:1"], "batch_size": 32}


def test_the_timeline_page_draws_the_published_faults():
    board = RunBoard()
    board.publish("run-1", event_rows(fault_run()), DESCRIPTION)
    page = show_page(PAGE_FIGURES["/individual-workbench-timeline"], board, Document())
    sources = page.charts.sources
    assert list(sources["failures"].data["device"]) == [FAILED_DEVICE]
    assert len(sources["recoveries"].data["phase"]) == 2
    assert list(sources["dropped"].data["phase"]) == ["dropped"]
    drawn = {renderer.data_source.name for renderer in page.charts.figures["timeline"].renderers}
    assert {"failures", "recoveries", "dropped"} <= drawn
