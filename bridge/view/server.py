"""The view's web server (Starlette, which the MCP SDK already brings): the pages and the JSON API
under `/api/`, and the guard every request passes first.

Safe by default: the server binds loopback; another address needs a token (sent once as
`?token=`, then kept in a strict same-site cookie, or as `Authorization: Bearer`). The Host
header must name the address served and an Origin header, when sent, the same (a DNS-rebinding
page gets 403). Every response forbids inline script, framing and sniffing.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from bridge.errors import BridgeError
from bridge.reports.markup import e
from bridge.view import attempt as attempt_data
from bridge.view import data, pages
from bridge.view.catalog import Catalog

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "rgbridge_view_token"
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
FILTERS = ("task", "outcome", "error", "over", "sort")

#: the one script of the served pages: the run page's live update (polls its JSON, sets text only)
VIEW_JS = """(function () {
  "use strict";
  var body = document.body, url = body.dataset.live;
  if (!url) return;
  function render(d) {
    var tbody = document.querySelector("#attempts tbody");
    var rows = document.createDocumentFragment();
    d.rows.forEach(function (r) {
      var tr = document.createElement("tr");
      r.cells.forEach(function (text, i) {
        var td = document.createElement("td"), inner = td;
        if (i === 0) { inner = document.createElement("a"); inner.href = r.href; td.appendChild(inner); }
        if (i === 1) { inner = document.createElement("span"); inner.className = "status " + r.status; td.appendChild(inner); }
        inner.textContent = text;
        tr.appendChild(td);
      });
      rows.appendChild(tr);
    });
    tbody.replaceChildren(rows);
    Object.keys(d.counts).forEach(function (k) {
      var el = document.getElementById("count-" + k);
      if (el) el.textContent = String(d.counts[k]);
    });
    document.getElementById("live-state").textContent = d.going ? "running" : "finished";
  }
  function tick() {
    fetch(url + location.search, {headers: {"Accept": "application/json"}, credentials: "same-origin"})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (d) { if (d) render(d); if (!d || d.going) setTimeout(tick, 1000); })
      .catch(function () { setTimeout(tick, 3000); });
  }
  setTimeout(tick, 1000);
})();
"""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, port: int) -> set[str] | None:
    """The Host header values a request may carry: the address served, with and without port;
    None for a wildcard address (0.0.0.0, ::: any name of the machine; the token guards it)."""
    if host in ("0.0.0.0", "::", ""):
        return None
    names = {host, f"[{host}]" if ":" in host else host}
    if is_loopback(host):
        names |= {"127.0.0.1", "localhost", "[::1]"}
    return {n.lower() for n in names} | {f"{n}:{port}".lower() for n in names}


class Guard:
    """ASGI middleware: the Host and Origin checks, and the token when one is set."""

    def __init__(self, app: ASGIApp, *, hosts: set[str] | None, token: str | None) -> None:
        if hosts is None and token is None:
            raise ValueError("a wildcard address needs a token")
        self.app, self.hosts, self.token = app, hosts, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        host = headers.get("host", "").lower()
        origin = headers.get("origin")
        hosts = self.hosts if self.hosts is not None else {host}
        if not host or host not in hosts:
            await _deny(scope, receive, send, 403, "Host not allowed (the view answers only its own address)")
            return
        if origin is not None and origin != "null" and urlsplit(origin).netloc.lower() not in hosts:
            await _deny(scope, receive, send, 403, "Origin not allowed")
            return
        if origin == "null":
            await _deny(scope, receive, send, 403, "Origin not allowed")
            return
        set_cookie = False
        if self.token is not None:
            given = _token_of(scope, headers)
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                await _deny(scope, receive, send, 401, "a token is needed: open the URL the view printed")
                return
            set_cookie = COOKIE not in headers.get("cookie", "")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                raw = list(message.get("headers") or [])
                raw += [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
                if set_cookie and self.token is not None:
                    raw.append((b"set-cookie", f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode()))
                message["headers"] = raw
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _token_of(scope: Scope, headers: dict[str, str]) -> str | None:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value
    query = parse_qs((scope.get("query_string") or b"").decode("latin-1"))
    values = query.get("token") or []
    return str(values[0]) if values else None


async def _deny(scope: Scope, receive: Receive, send: Send, status: int, text: str) -> None:
    response = Response(text + "\n", status_code=status, media_type="text/plain", headers=HEADERS)
    await response(scope, receive, send)


def _filters(request: Request) -> dict[str, str]:
    return {k: request.query_params[k][:200] for k in FILTERS if request.query_params.get(k)}


def build_app(
    catalog: Catalog,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    seed: int = 0,
    reference: Path | None = None,
    reference_board: str | None = None,
) -> ASGIApp:
    """The view's ASGI app over `catalog`, guarded for `host`:`port`."""
    links = pages.Links()

    def html(render: Callable[[], str]) -> Response:
        try:
            return HTMLResponse(render())
        except BridgeError as exc:
            return HTMLResponse(pages.shell("Not found", f"<p class='fail'>{e(exc)}</p>", links), status_code=404)

    def api(build: Callable[[], Any]) -> Response:
        try:
            return JSONResponse(json.loads(json.dumps(build(), default=str)))
        except BridgeError as exc:
            return JSONResponse({"error": str(exc)[:500]}, status_code=404)

    def reference_html(ids: list[str]) -> str:
        if reference is None:
            return ""
        from bridge.reports.reference import load_reference
        from bridge.reports.reference import reference_html as beside

        rows = load_reference(reference, reference_board)
        return "".join(beside(data.report_of(catalog.get(i)), rows) for i in ids)

    def index(request: Request) -> Response:
        return html(lambda: pages.runs_page(data.runs(catalog, seed=seed), links))

    def run_page(request: Request) -> Response:
        rid = request.path_params["rid"]
        return html(
            lambda: pages.run_page(
                data.run_detail(catalog, catalog.get(rid), filters=_filters(request), seed=seed), links
            )
        )

    def attempt_page(request: Request) -> Response:
        rid, key = request.path_params["rid"], request.path_params["key"]
        return html(lambda: pages.attempt_page(attempt_data.attempt_detail(catalog, catalog.get(rid), key), links))

    def compare_page(request: Request) -> Response:
        ids = request.query_params.getlist("run")[:8]
        return html(lambda: pages.compare_page(data.compare(catalog, ids, seed=seed), links, reference_html(ids)))

    def view_js(request: Request) -> Response:
        return Response(VIEW_JS, media_type="text/javascript")

    def api_runs(request: Request) -> Response:
        return api(lambda: data.runs(catalog, seed=seed))

    def api_run(request: Request) -> Response:
        rid = request.path_params["rid"]
        return api(lambda: data.run_detail(catalog, catalog.get(rid), filters=_filters(request), seed=seed))

    def api_live(request: Request) -> Response:
        rid = request.path_params["rid"]

        def build() -> dict[str, Any]:
            detail = data.run_detail(catalog, catalog.get(rid), filters=_filters(request), seed=seed)
            return {"going": detail["going"], "counts": detail["counts"], "rows": pages.live_rows(detail, links)}

        return api(build)

    def api_attempt(request: Request) -> Response:
        rid, key = request.path_params["rid"], request.path_params["key"]
        return api(lambda: attempt_data.attempt_detail(catalog, catalog.get(rid), key))

    def api_file(request: Request) -> Response:
        rid, key, name = request.path_params["rid"], request.path_params["key"], request.path_params["name"]
        try:
            body = attempt_data.recording_file(catalog, catalog.get(rid), key, name)
        except BridgeError as exc:
            return JSONResponse({"error": str(exc)[:500]}, status_code=404)
        # text/plain, never rendered: the recording is the agent's
        return Response(body, media_type="text/plain; charset=utf-8", headers={"Content-Disposition": "inline"})

    def api_compare(request: Request) -> Response:
        ids = request.query_params.getlist("run")[:8]
        return api(lambda: data.compare(catalog, ids, seed=seed))

    routes = [
        Route("/", index),
        Route("/view.js", view_js),
        Route("/runs/{rid}", run_page),
        Route("/runs/{rid}/attempts/{key}", attempt_page),
        Route("/compare", compare_page),
        Route("/api/runs", api_runs),
        Route("/api/runs/{rid}", api_run),
        Route("/api/runs/{rid}/live", api_live),
        Route("/api/runs/{rid}/attempts/{key}", api_attempt),
        Route("/api/runs/{rid}/attempts/{key}/files/{name:path}", api_file),
        Route("/api/compare", api_compare),
    ]
    return Guard(Starlette(routes=routes), hosts=allowed_hosts(host, port), token=token)
