"""HTTP over :class:`~workbench.server.manager.RunsManager`: thin, authenticated tornado handlers.

In: requests under ``<base_url>/workbench/`` from the JupyterLab frontend (and its chart tabs),
authenticated by Jupyter Server's identity provider (token or login cookie; a cookie-authenticated
POST must also pass the XSRF check). Out: JSON (errors too: ``{"message": ...}``), a CSV, an HTML
chart page and BokehJS files. Every method refuses a request without a user: ``web.authenticated``
answers 403 on the API and redirects to the login page for the HTML page; ``authorized`` then asks
the server's authorizer about the ``workbench`` resource. No CORS headers are added.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bokeh.util.paths import bokehjs_path
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler, AuthenticatedFileHandler, JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

from workbench.safe_io import strict_dumps
from workbench.server.manager import RunsManager
from workbench.store import StoreError

MANAGER_SETTING = "workbench_runs_manager"
AUTH_RESOURCE = "workbench"
# Any plain name, so that an unknown page gets the 404 that lists the pages. No "%": tornado
# would read one in an error message as a format.
PAGE = r"[A-Za-z0-9_-]+"
# Any path segment: the manager answers 404 for an id that breaks the run-id rule
# (workbench/store/run_ids.py), with a JSON message like every other unknown run.
RUN_SEGMENT = r"[^/]+"


class WorkbenchHandler(APIHandler):
    """What every API handler shares: the manager, and its errors as HTTP statuses."""

    auth_resource = AUTH_RESOURCE

    @property
    def manager(self) -> RunsManager:
        return self.settings[MANAGER_SETTING]

    async def call(self, method: Callable[..., Any], *args: Any) -> Any:
        """``method(*args)`` in a worker thread (it reads files; the server keeps serving), with
        ``KeyError`` (unknown run or page) as 404, ``ValueError`` (wrong state) as 409,
        ``PermissionError`` (another user's run) as 403 and a refused store as 500."""
        try:
            return await asyncio.to_thread(method, *args)
        except KeyError as error:
            raise web.HTTPError(404, _message(error)) from error
        except ValueError as error:
            raise web.HTTPError(409, _message(error)) from error
        except PermissionError as error:
            raise web.HTTPError(403, _message(error)) from error
        except StoreError as error:
            raise web.HTTPError(500, _message(error)) from error


def _message(error: Exception) -> str:
    # str(KeyError("x")) is "'x'"; the message is the argument. An OSError from the system
    # (errno set) says it all in str().
    if isinstance(error, OSError) and error.errno is not None:
        return str(error)
    return str(error.args[0] if error.args else error)


class RunsHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(strict_dumps({"runs": await self.call(self.manager.runs)}))


class RunHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        self.finish(strict_dumps(await self.call(self.manager.run, run_id)))


class StopHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def post(self, run_id: str) -> None:
        record = await self.call(self.manager.stop, run_id)
        self.set_status(202)  # accepted: the run stops after the step in flight
        self.finish(strict_dumps(record))


class ClustersHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(strict_dumps({"clusters": await self.call(self.manager.clusters)}))


class ChartDataHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def get(self, run_id: str, page: str) -> None:
        self.finish(strict_dumps(await self.call(self.manager.chart_data, run_id, page)))


class TraceHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        trace = await self.call(self.manager.trace, run_id)
        self.set_header("Content-Disposition", f'attachment; filename="{run_id}-trace.json"')
        self.finish(trace)


class ScalarsCsvHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        table = await self.call(self.manager.scalars_csv, run_id)
        self.set_header("Content-Disposition", f'attachment; filename="{run_id}-scalars.csv"')
        self.finish(table, set_content_type="text/csv; charset=UTF-8")


class ChartPageHandler(JupyterHandler):
    """The HTML chart page; its errors are JSON like the API's (a tab shows the message)."""

    auth_resource = AUTH_RESOURCE

    @web.authenticated
    @authorized
    async def get(self, run_id: str, page: str) -> None:
        manager: RunsManager = self.settings[MANAGER_SETTING]
        try:
            await asyncio.to_thread(manager.run, run_id)  # 404 for a run that is not there
            # Bokeh is imported on the first page, not when JupyterLab starts.
            from workbench.server.chart_pages import render_chart_page

            html = await asyncio.to_thread(render_chart_page, run_id, page, self.base_url)
        except KeyError as error:
            raise web.HTTPError(404, _message(error)) from error
        self.finish(html)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        APIHandler.write_error(self, status_code, **kwargs)  # type: ignore[arg-type]


class BokehStaticHandler(AuthenticatedFileHandler):
    """BokehJS from the installed bokeh package, to logged-in users only (the chart pages)."""

    auth_resource = AUTH_RESOURCE


def routes(base_url: str) -> list[tuple[str, type, dict[str, Any]]]:
    """The extension's routes under ``<base_url>/workbench``."""
    base = url_path_join(base_url, "workbench")
    run = rf"/runs/(?P<run_id>{RUN_SEGMENT})"
    api = [
        ("/runs", RunsHandler),
        (run, RunHandler),
        (rf"{run}/stop", StopHandler),
        ("/clusters", ClustersHandler),
        (rf"{run}/charts/(?P<page>{PAGE})", ChartDataHandler),
        (rf"{run}/trace", TraceHandler),
        (rf"{run}/scalars\.csv", ScalarsCsvHandler),
    ]
    routes: list[tuple[str, type, dict[str, Any]]] = [
        (url_path_join(base, "api") + path, handler, {}) for path, handler in api
    ]
    routes.append((base + rf"{run}/charts/(?P<page>{PAGE})", ChartPageHandler, {}))
    routes.append(
        (
            url_path_join(base, "static", "bokeh") + "/(.*)",
            BokehStaticHandler,
            {"path": str(bokehjs_path())},
        )
    )
    return routes
