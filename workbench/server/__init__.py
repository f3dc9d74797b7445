"""The Jupyter Server extension behind the workbench's JupyterLab sidebar.

Runs are not this process's: kernels train them and write them to the run store (config,
events, status, summary; docs/architecture/events.md, "Events"). This extension reads the store and
serves it under ``<base_url>/workbench/``:

- ``api/runs``, ``api/runs/<id>``, ``api/clusters``: the run list (newest first), one run with
  its config and summary, the clusters live runs train on (JSON);
- ``POST api/runs/<id>/stop``: asks a running run to stop — the only write, a marker file the
  training process polls for (202; 409 if it is not running);
- ``api/runs/<id>/charts/<page>``, ``runs/<id>/charts/<page>``: a chart page's columns (JSON,
  read incrementally from the events file) and the page itself (HTML, BokehJS served from
  ``static/bokeh/``, never a CDN);
- ``api/runs/<id>/trace``, ``api/runs/<id>/scalars.csv``: the Chrome trace and the scalars.

State apart from I/O: :class:`~workbench.server.manager.RunsManager` does all of it and is tested
without HTTP; :mod:`~workbench.server.handlers` are thin, every method authenticated (and a
cookie-authenticated POST XSRF-checked, as Jupyter Server does by default). Enabled by
``jupyter-config/server-config/dtrain_workbench.json``, installed into
``etc/jupyter/jupyter_server_config.d``.
"""

from __future__ import annotations

from typing import Any

from workbench.server.handlers import MANAGER_SETTING, routes
from workbench.server.manager import RunsManager

__all__ = ["MANAGER_SETTING", "RunsManager"]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "workbench.server"}]


def _load_jupyter_server_extension(server_app: Any) -> None:
    """Register the routes on the server's web app (``server_app`` is a ``ServerApp``)."""
    web_app = server_app.web_app
    manager = web_app.settings[MANAGER_SETTING] = RunsManager()
    web_app.add_handlers(".*$", routes(web_app.settings["base_url"]))
    server_app.log.info("dtrain workbench: serving the run store at %s", manager.store.root)
