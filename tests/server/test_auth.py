"""Nothing of the workbench is served without a login, and a browser's POST needs the XSRF token.

The routes are read from the running server (every handler class from ``workbench.server``),
so an endpoint added later is checked without touching this file. Requests go straight to the
server with the plain tornado client, without ``jp_fetch``'s token.
"""

from __future__ import annotations

import re
import urllib.parse
from http.cookies import SimpleCookie

import pytest
from tornado.routing import PathMatches
from tornado.web import RequestHandler

from workbench.server import handlers as handlers_module
from workbench.store import RunStore

METHODS = ("get", "head", "post", "put", "delete", "patch")
SAMPLE_GROUPS = {"run_id": "live", "page": "loss"}
SAMPLE_PATH = "js/bokeh.min.js"  # for the static route's unnamed group


def workbench_routes(web_app) -> list[tuple[str, type]]:
    """(regex, handler class) of every route whose handler comes from workbench.server."""
    found = []

    def walk(router) -> None:
        for rule in getattr(router, "rules", []):
            target = rule.target
            if isinstance(target, type) and issubclass(target, RequestHandler):
                if target.__module__.startswith("workbench.server"):
                    assert isinstance(rule.matcher, PathMatches)
                    found.append((rule.matcher.regex.pattern, target))
            else:
                walk(target)

    walk(web_app.default_router)
    walk(web_app.wildcard_router)
    return found


def sample_path(pattern: str) -> str:
    """A request path the route's pattern matches, with the groups filled in."""
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda group: SAMPLE_GROUPS[group[1]], pattern)
    path = path.replace("(.*)", SAMPLE_PATH).rstrip("$").replace("\\.", ".")
    assert re.fullmatch(pattern, path), (pattern, path)
    return path


def implemented_methods(handler: type) -> list[str]:
    return [
        method.upper()
        for method in METHODS
        if getattr(handler, method) is not getattr(RequestHandler, method)
    ]


def store_files(root) -> dict[str, int]:
    return {str(path): path.stat().st_mtime_ns for path in root.rglob("*") if path.is_file()}


@pytest.fixture
def live_run(runs):
    runs.run("live", state=None, recorded=2)
    return RunStore(runs.store.root).open("live")


def test_every_workbench_handler_is_routed(jp_serverapp):
    routed = {handler for _, handler in workbench_routes(jp_serverapp.web_app)}
    defined = {
        value
        for value in vars(handlers_module).values()
        if isinstance(value, type)
        and issubclass(value, RequestHandler)
        and value.__module__ == handlers_module.__name__
        and implemented_methods(value)
    }
    assert routed == defined and len(routed) == 9


@pytest.mark.parametrize("authorization", [None, "token not-the-token"])
async def test_every_route_and_method_refuses_a_request_without_a_valid_login(
    jp_serverapp, http_server_client, live_run, store_root, authorization
):
    before = store_files(store_root)
    checked = []
    for pattern, handler in workbench_routes(jp_serverapp.web_app):
        path = sample_path(pattern)
        for method in implemented_methods(handler):
            headers = {"Authorization": authorization} if authorization else {}
            response = await http_server_client.fetch(
                path,
                method=method,
                body=b"" if method in ("POST", "PUT", "PATCH") else None,
                headers=headers,
                raise_error=False,
                follow_redirects=False,
            )
            location = response.headers.get("Location", "")
            refused = response.code in (401, 403) or (
                response.code == 302 and urllib.parse.urlsplit(location).path.endswith("/login")
            )
            assert refused, (method, path, response.code, location)
            checked.append((method, handler.__name__))
            if method in ("GET", "HEAD"):  # the same request with the token is served
                token = {"Authorization": f"token {jp_serverapp.identity_provider.token}"}
                served = await http_server_client.fetch(path, method=method, headers=token)
                assert served.code == 200, (method, path)
    assert ("POST", "StopHandler") in checked and ("GET", "BokehStaticHandler") in checked
    assert not live_run.stop_requested()
    assert store_files(store_root) == before  # nothing written, nothing read into a marker


def cookies_of(response) -> dict[str, str]:
    jar = SimpleCookie()
    for header in response.headers.get_list("Set-Cookie"):
        jar.load(header)
    return {name: morsel.value for name, morsel in jar.items()}


def cookie_header(cookies: dict[str, str]) -> str:
    return "; ".join(f"{name}={value}" for name, value in cookies.items())


async def log_in(http_server_client, base_url: str, token: str) -> dict[str, str]:
    """Log in as a browser does: the login form's page sets the ``_xsrf`` cookie, posting the
    token as the password (with that ``_xsrf``) sets the login cookie."""
    page = await http_server_client.fetch(f"{base_url}login", raise_error=False)
    cookies = cookies_of(page)
    form = urllib.parse.urlencode({"password": token, "_xsrf": cookies["_xsrf"]})
    answer = await http_server_client.fetch(
        f"{base_url}login",
        method="POST",
        body=form,
        headers={"Cookie": cookie_header(cookies)},
        raise_error=False,
        follow_redirects=False,
    )
    assert answer.code == 302, answer.code
    cookies.update(cookies_of(answer))
    assert any(name.startswith("username-") for name in cookies), cookies
    return cookies


async def test_a_cookie_logged_in_post_needs_the_xsrf_token(
    jp_serverapp, http_server_client, jp_base_url, live_run
):
    cookies = await log_in(http_server_client, jp_base_url, jp_serverapp.identity_provider.token)
    stop = f"{jp_base_url}workbench/api/runs/live/stop"

    async def request(path: str, method: str = "GET", **headers: str):
        return await http_server_client.fetch(
            path,
            method=method,
            body=b"" if method == "POST" else None,
            headers={"Cookie": cookie_header(cookies), **headers},
            raise_error=False,
            follow_redirects=False,
        )

    # The cookie is a login: reading works.
    assert (await request(f"{jp_base_url}workbench/api/runs")).code == 200
    # A POST a page elsewhere could make the browser send: cookie but no XSRF header.
    assert (await request(stop, "POST")).code == 403
    assert (await request(stop, "POST", **{"X-XSRFToken": "forged"})).code == 403
    # The right header from another origin is still refused.
    evil = {"X-XSRFToken": cookies["_xsrf"], "Origin": "http://evil.example"}
    assert (await request(stop, "POST", **evil)).code in (403, 404)
    assert not live_run.stop_requested()
    # The frontend sends the header with the _xsrf cookie's value: accepted.
    accepted = await request(stop, "POST", **{"X-XSRFToken": cookies["_xsrf"]})
    assert accepted.code == 202 and live_run.stop_requested()
