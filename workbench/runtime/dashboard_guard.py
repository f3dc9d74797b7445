"""The dashboard of a cluster the workbench starts answers its user only
(docs/security/dashboard.md).

Every HTTP request and websocket to the scheduler's dashboard server (Dask's pages, the Bokeh
applications and their websockets, static files, ``/json``, ``/metrics``, ``/health``, the
workbench's pages) must carry the cluster's token: as ``?token=`` in the address (the link the
workbench prints), or as the cookie the first such request sets (``HttpOnly``,
``SameSite=Strict``), so the page's scripts, styles and websocket pass without it. Anything
else gets 403 and no data.

The guard is a tornado router put in front of the scheduler's whole application: Dask's own
routes and the Bokeh applications it adds are all found through that one application, so no
route escapes it. It is installed as a scheduler extension, which the scheduler builds in its
constructor after its HTTP server started listening but before its event loop runs again: no
request is ever answered unguarded, and a guard that fails to install fails the cluster's start
instead of leaving the dashboard open. The token reaches the scheduler in memory: a local
cluster runs its scheduler in the process that starts it.
"""

from __future__ import annotations

import functools
import hmac
import secrets
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tornado import httputil, web
from tornado.routing import Router

TOKEN_ARGUMENT = "token"
EXTENSION = "dtrain_dashboard_guard"  # key of the guard in scheduler.extensions
_COOKIE_PREFIX = "dtrain-dashboard-"


def new_token() -> str:
    """A fresh token for one cluster's dashboard."""
    return secrets.token_urlsafe(32)


def cookie_name(port: int) -> str:
    """The guard's cookie for the dashboard on ``port``: browsers keep cookies per host, not
    per port, so each dashboard on 127.0.0.1 has its own name."""
    return f"{_COOKIE_PREFIX}{port}"


def link_with_token(link: str, token: str) -> str:
    """``link`` (a dashboard address) with ``?token=`` added, other query arguments kept.

    Examples
    --------
    >>> link_with_token("http://127.0.0.1:8787/status", "abc")
    'http://127.0.0.1:8787/status?token=abc'
    """
    parts = urlsplit(link)
    query = [
        (name, value)
        for name, value in parse_qsl(parts.query, keep_blank_values=True)
        if name != TOKEN_ARGUMENT
    ]
    return urlunsplit(parts._replace(query=urlencode([*query, (TOKEN_ARGUMENT, token)])))


def guarded_extensions(token: str, extensions: dict | None = None) -> dict:
    """The ``extensions`` keyword of a ``Scheduler`` whose dashboard needs ``token``: Dask's
    defaults (as the scheduler would choose them), or ``extensions``, plus the guard."""
    if extensions is None:
        import dask
        from distributed.scheduler import DEFAULT_EXTENSIONS

        extensions = dict(DEFAULT_EXTENSIONS)
        if not dask.config.get("distributed.scheduler.work-stealing"):
            extensions.pop("stealing", None)
    return {**extensions, EXTENSION: functools.partial(DashboardGuard.install, token=token)}


class _Refused(web.RequestHandler):
    """Every method of every path: 403, and a line saying what is missing (nothing else)."""

    def prepare(self) -> None:
        raise web.HTTPError(403)

    def write_error(self, status_code: int, **kwargs) -> None:
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(
            f"{status_code}: this dashboard answers only the link the workbench printed "
            f"for its cluster (with ?{TOKEN_ARGUMENT}=...)\n"
        )


class DashboardGuard(Router):
    """Routes a request to the scheduler's application when it carries the token, to a 403
    otherwise; a request that shows the token in its address also gets the cookie."""

    def __init__(self, application: web.Application, token: str, port: int) -> None:
        self.application = application
        self._token = token.encode()
        self._cookie = cookie_name(port)

    def __repr__(self) -> str:  # the scheduler's state dumps list its extensions
        return f"DashboardGuard(cookie={self._cookie!r})"

    @classmethod
    def install(cls, scheduler, token: str) -> DashboardGuard:
        """Put a guard in front of everything ``scheduler``'s dashboard server answers."""
        server = scheduler.http_server
        guard = cls(server.request_callback, token, server.port)
        server.request_callback = guard
        return guard

    def find_handler(self, request: httputil.HTTPServerRequest, **kwargs):
        if self._matches(request.query_arguments.get(TOKEN_ARGUMENT, [])):
            _set_cookie_with_response(request, self._cookie_header())
        elif not self._matches(_cookie_values(request, self._cookie)):
            return self.application.get_handler_delegate(request, _Refused)
        return self.application.find_handler(request, **kwargs)

    def _matches(self, presented: list[bytes]) -> bool:
        # Compared in constant time: the time taken says nothing of how much matched.
        return any(hmac.compare_digest(value, self._token) for value in presented)

    def _cookie_header(self) -> str:
        # No Domain: the cookie goes back to this host only; no Max-Age: it ends with the
        # browser session (the token ends with the cluster anyway).
        return f"{self._cookie}={self._token.decode()}; Path=/; HttpOnly; SameSite=Strict"


def _cookie_values(request: httputil.HTTPServerRequest, name: str) -> list[bytes]:
    try:
        morsel = request.cookies.get(name)
    except Exception:  # a malformed Cookie header carries no valid token
        return []
    return [morsel.value.encode("utf-8", "surrogateescape")] if morsel is not None else []


def _set_cookie_with_response(request: httputil.HTTPServerRequest, cookie: str) -> None:
    """Add ``Set-Cookie`` to the response of this one request, whichever handler writes it
    (tornado makes a connection object per request, so nothing else gets it)."""
    connection = request.connection
    if connection is None:
        return
    write_headers = connection.write_headers

    def with_cookie(start_line, headers: httputil.HTTPHeaders, chunk=None):
        headers.add("Set-Cookie", cookie)
        return write_headers(start_line, headers, chunk)

    connection.write_headers = with_cookie  # type: ignore[method-assign]
