#!/usr/bin/env python3
"""Probe README endpoints against a running service (strict dynamic API coverage).

Standalone and stdlib-only: it runs with the tester container's python3.

Usage:
    probe_endpoints.py ENDPOINTS_JSON BASE_URL
    PROBE_ENDPOINTS=... PROBE_BASE_URL=... probe_endpoints.py
ENDPOINTS_JSON is a file holding `[{"method": "GET", "path": "/items/{id}"}, ...]`, `-` for
stdin, or the JSON text itself. PROBE_TIMEOUT (seconds, default 3) bounds each request.

Path placeholders `{name}`, `<name>`, `<conv:name>` and `:name` are replaced by `1` when the
name looks numeric (id, num, page, ...) and by `rgbridge-probe` otherwise. POST/PUT/PATCH send
an empty JSON object. Redirects are not followed. For each method one control request is sent
to a path that cannot exist, so the grader can recognise an app's catch-all 404.

Prints a JSON list: {method, path, url_path, status, error, body, content_type,
control_path, control_status, control_body}. `status` is null when no response came back.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPMessage
from typing import IO, Any

BODY_CHARS = 2048
CONTROL_PATH = "/rgbridge-probe-unrouted-7f3a9c"
_NUMERIC_HINT = re.compile(r"(^|_)(id|num|number|page|count|index|idx|int|pk)$|id$", re.IGNORECASE)
_PLACEHOLDER = re.compile(r"\{([^}/]*)\}|<(?:[^:>/]*:)?([^>/]*)>|(?<=/):([A-Za-z_][A-Za-z0-9_]*)")
_WITH_BODY = {"POST", "PUT", "PATCH"}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str, headers: HTTPMessage, newurl: str
    ) -> urllib.request.Request | None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def fill_placeholders(path: str) -> str:
    def repl(m: re.Match[str]) -> str:
        raw = m.group(0)
        name = m.group(1) or m.group(2) or m.group(3) or ""
        if raw.startswith("<") and ":" in raw and raw.split(":")[0][1:] in ("int", "float"):
            return "1"
        return "1" if _NUMERIC_HINT.search(name) else "rgbridge-probe"

    return _PLACEHOLDER.sub(repl, path)


def request(base_url: str, method: str, path: str, timeout: float) -> dict[str, Any]:
    url = base_url.rstrip("/") + (path if path.startswith("/") else "/" + path)
    data = b"{}" if method in _WITH_BODY else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json, text/html;q=0.9, */*;q=0.8")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    out = {"status": None, "error": None, "body": "", "content_type": ""}
    try:
        resp = _OPENER.open(req, timeout=timeout)
    except urllib.error.HTTPError as exc:  # 4xx/5xx and unfollowed 3xx
        resp = exc
    except Exception as exc:  # connection refused, timeout, bad status line ...
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
        return out
    try:
        out["status"] = resp.status if hasattr(resp, "status") else resp.code
        out["content_type"] = resp.headers.get("Content-Type", "") if resp.headers else ""
        out["body"] = resp.read(BODY_CHARS * 4).decode("utf-8", "replace")[:BODY_CHARS]
    except Exception as exc:  # body read failed: the status still counts
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        try:
            resp.close()
        except Exception:
            pass
    return out


def load_endpoints(arg: str) -> list[dict[str, Any]]:
    if arg == "-":
        text = sys.stdin.read()
    elif arg.lstrip().startswith("["):
        text = arg
    else:
        with open(arg, encoding="utf-8") as fh:
            text = fh.read()
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("endpoints must be a JSON list")
    return [e for e in data if isinstance(e, dict) and "method" in e and "path" in e]


def probe(endpoints: list[dict[str, Any]], base_url: str, timeout: float) -> list[dict[str, Any]]:
    controls: dict[str, dict[str, Any]] = {}
    results = []
    for ep in endpoints:
        method = str(ep["method"]).upper()
        path = str(ep["path"])
        if method not in ("GET", "POST", "PUT", "DELETE", "PATCH"):
            results.append(
                {
                    "method": method,
                    "path": path,
                    "url_path": path,
                    "status": None,
                    "error": "not an HTTP endpoint",
                    "body": "",
                    "content_type": "",
                }
            )
            continue
        if method not in controls:
            controls[method] = request(base_url, method, CONTROL_PATH, timeout)
        url_path = fill_placeholders(path)
        res = request(base_url, method, url_path, timeout)
        ctl = controls[method]
        results.append(
            {
                "method": method,
                "path": path,
                "url_path": url_path,
                **res,
                "control_path": CONTROL_PATH,
                "control_status": ctl["status"],
                "control_body": ctl["body"],
            }
        )
    return results


def main(argv: list[str]) -> int:
    endpoints_arg = argv[1] if len(argv) > 1 else os.environ.get("PROBE_ENDPOINTS", "")
    base_url = argv[2] if len(argv) > 2 else os.environ.get("PROBE_BASE_URL", "")
    if not endpoints_arg or not base_url:
        print("usage: probe_endpoints.py ENDPOINTS_JSON BASE_URL", file=sys.stderr)
        return 2
    timeout = float(os.environ.get("PROBE_TIMEOUT", "3"))
    try:
        endpoints = load_endpoints(endpoints_arg)
    except (OSError, ValueError) as exc:
        print(f"cannot read endpoints: {exc}", file=sys.stderr)
        return 2
    json.dump(probe(endpoints, base_url, timeout), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
