"""The scheduler's side of the wire: a :class:`RunBoard` on the scheduler and the two comm
handlers that fill it (clients publishing a run's events) and describe it (tests, tools).

Names live here so the client-side publisher and the scheduler agree on them.
"""

from __future__ import annotations

from workbench.dashboard.run_board import RunBoard

PRELOAD = "workbench.dashboard.preload"  # dask scheduler --preload workbench.dashboard.preload
BOARD_EXTENSION = "workbench_dashboard"  # key of the board in scheduler.extensions
PUBLISH_EVENTS = "dtrain_publish_events"
LIST_RUNS = "dtrain_dashboard_runs"


def install(scheduler) -> RunBoard:
    """Give ``scheduler`` a run board and the handlers for it (idempotent)."""
    board = scheduler.extensions.get(BOARD_EXTENSION)
    if board is None:
        board = scheduler.extensions[BOARD_EXTENSION] = RunBoard()

    def publish_events(
        run: str, events: list, description: dict | None = None, finished: bool = False
    ) -> dict:
        # The reply tells the publisher the handler exists: a scheduler without it answers
        # an unknown operation with None.
        return {"accepted": board.publish(run, events, description, finished)}

    def list_runs() -> dict:
        return board.summary()

    scheduler.handlers[PUBLISH_EVENTS] = publish_events
    scheduler.handlers[LIST_RUNS] = list_runs
    return board


def board_of(scheduler) -> RunBoard | None:
    """The scheduler's run board, or None if it was started without the preload."""
    return scheduler.extensions.get(BOARD_EXTENSION)
