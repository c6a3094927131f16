"""kv-ledger: a versioned key-value store with counters, using only the standard library."""
from __future__ import annotations

import json
import re
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlsplit

HOST, PORT = "0.0.0.0", 8090
NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DEFAULT_LIMIT, MAX_LIMIT = 100, 1000


class ApiError(Exception):
    """An error answered as `{"error": message, "code": code, ...extra}`."""

    def __init__(self, status: int, code: str, message: str, *,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code = status, code
        self.headers, self.extra = headers or {}, extra

    def body(self) -> dict[str, Any]:
        return {"error": str(self), "code": self.code, **self.extra}


def _reject_constant(name: str) -> None:
    # NaN/Infinity are not JSON; accepting them would make us emit invalid JSON later.
    raise ValueError(f"{name} is not valid JSON")


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class Request:
    params: dict[str, str]
    query: dict[str, list[str]]
    body: bytes

    def name(self, param: str) -> str:
        value = unquote(self.params[param])
        if not NAME_RE.fullmatch(value):
            raise ApiError(400, "invalid_key", f"{param} must match [A-Za-z0-9_.-]{{1,64}}")
        return value

    def json(self, *, optional: bool = False) -> dict[str, Any]:
        if optional and not self.body.strip():
            return {}
        try:
            data = json.loads(self.body, parse_constant=_reject_constant)
        except ValueError:  # includes JSONDecodeError and UnicodeDecodeError
            raise ApiError(400, "invalid_json", "request body is not valid JSON") from None
        if not isinstance(data, dict):
            raise ApiError(400, "validation_error", "request body must be a JSON object")
        return data

    def arg(self, name: str, default: str) -> str:
        return self.query.get(name, [default])[0]


Handler = Callable[[Request], tuple[int, Any]]


class Router:
    """Maps (method, path pattern) to a handler; `{name}` matches one non-empty segment."""

    def __init__(self) -> None:
        self.routes: list[tuple[str, re.Pattern[str], Handler]] = []

    def route(self, method: str, pattern: str) -> Callable[[Handler], Handler]:
        regex = re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern))

        def register(handler: Handler) -> Handler:
            self.routes.append((method, regex, handler))
            return handler
        return register

    def get(self, pattern: str) -> Callable[[Handler], Handler]:
        return self.route("GET", pattern)

    def put(self, pattern: str) -> Callable[[Handler], Handler]:
        return self.route("PUT", pattern)

    def post(self, pattern: str) -> Callable[[Handler], Handler]:
        return self.route("POST", pattern)

    def delete(self, pattern: str) -> Callable[[Handler], Handler]:
        return self.route("DELETE", pattern)

    def resolve(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        allowed: list[str] = []
        for route_method, regex, handler in self.routes:
            match = regex.fullmatch(path)
            if match and route_method == method:
                return handler, match.groupdict()
            if match:
                allowed.append(route_method)
        if allowed:
            raise ApiError(405, "method_not_allowed", f"{method} is not allowed on {path}",
                           headers={"Allow": ", ".join(allowed)})
        raise ApiError(404, "not_found", f"no route for {path}")


class Ledger:
    """All state, in memory, behind one lock: requests are served on many threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[str, list[Any]] = {}  # key -> values; index i is version i + 1
        self._counters: dict[str, int] = {}

    def put(self, key: str, value: Any, expected_version: int | None) -> int:
        with self._lock:
            values = self._versions.get(key, [])
            current = len(values)  # 0 when the key does not exist
            if expected_version is not None and expected_version != current:
                raise ApiError(409, "version_conflict",
                               f"expected version {expected_version}, current version is {current}",
                               current_version=current)
            values.append(value)
            self._versions[key] = values
            return current + 1

    def history(self, key: str) -> list[Any]:
        with self._lock:
            if key not in self._versions:
                raise ApiError(404, "key_not_found", f"key {key!r} not found")
            return list(self._versions[key])

    def delete(self, key: str) -> None:
        with self._lock:
            if self._versions.pop(key, None) is None:
                raise ApiError(404, "key_not_found", f"key {key!r} not found")

    def keys(self, prefix: str) -> list[str]:
        with self._lock:
            return sorted(k for k in self._versions if k.startswith(prefix))

    def increment(self, name: str, by: int) -> int:
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + by
            return self._counters[name]


app = Router()
ledger = Ledger()


@app.get("/health")
def health(req: Request) -> tuple[int, Any]:
    return 200, {"status": "ok"}


@app.get("/api/v1/keys")
def list_keys(req: Request) -> tuple[int, Any]:
    raw_limit = req.arg("limit", str(DEFAULT_LIMIT))
    if not re.fullmatch(r"[0-9]{1,6}", raw_limit) or not 1 <= int(raw_limit) <= MAX_LIMIT:
        raise ApiError(400, "validation_error", f"limit must be an integer from 1 to {MAX_LIMIT}")
    keys = ledger.keys(req.arg("prefix", ""))
    return 200, {"keys": keys[:int(raw_limit)], "total": len(keys)}


@app.put("/api/v1/keys/{key}")
def put_key(req: Request) -> tuple[int, Any]:
    key, body = req.name("key"), req.json()
    if "value" not in body:
        raise ApiError(400, "validation_error", "field 'value' is required")
    expected = body.get("expected_version")
    if "expected_version" in body and not (is_int(expected) and expected >= 0):
        raise ApiError(400, "validation_error", "expected_version must be a non-negative integer")
    version = ledger.put(key, body["value"], expected)
    return (201 if version == 1 else 200), {"key": key, "value": body["value"], "version": version}


@app.get("/api/v1/keys/{key}")
def get_key(req: Request) -> tuple[int, Any]:
    key = req.name("key")
    values = ledger.history(key)
    return 200, {"key": key, "value": values[-1], "version": len(values)}


@app.delete("/api/v1/keys/{key}")
def delete_key(req: Request) -> tuple[int, Any]:
    ledger.delete(req.name("key"))
    return 204, None


@app.get("/api/v1/keys/{key}/history")
def key_history(req: Request) -> tuple[int, Any]:
    key = req.name("key")
    versions = [{"version": i, "value": v} for i, v in enumerate(ledger.history(key), start=1)]
    return 200, {"key": key, "versions": versions}


@app.post("/api/v1/counters/{name}/increment")
def increment_counter(req: Request) -> tuple[int, Any]:
    name, body = req.name("name"), req.json(optional=True)
    by = body.get("by", 1)
    if not is_int(by):
        raise ApiError(400, "validation_error", "by must be an integer")
    return 200, {"name": name, "value": ledger.increment(name, by)}


class RequestHandler(BaseHTTPRequestHandler):
    server_version = "kv-ledger/1.0"

    def dispatch(self) -> None:
        url = urlsplit(self.path)
        headers: dict[str, str] = {}
        try:
            length = self.headers.get("Content-Length", "0")
            if not re.fullmatch(r"[0-9]+", length):
                raise ApiError(400, "invalid_json", "request body could not be read")
            body = self.rfile.read(int(length))
            handler, params = app.resolve(self.command, url.path)
            status, payload = handler(Request(params, parse_qs(url.query, keep_blank_values=True), body))
        except ApiError as err:
            status, payload, headers = err.status, err.body(), err.headers
        except Exception:  # a bug must still produce a JSON answer, not a dropped connection
            self.log_error("unhandled error:\n%s", traceback.format_exc())
            status, payload = 500, {"error": "internal server error", "code": "internal_error"}
        self.send_json(status, payload, headers)

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = dispatch

    def send_json(self, status: int, payload: Any, headers: dict[str, str]) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        if payload is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    # As PID 1 in a container SIGTERM has no default action; exit cleanly instead.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = ThreadingHTTPServer((HOST, PORT), RequestHandler)
    print(f"kv-ledger listening on http://{HOST}:{PORT}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
