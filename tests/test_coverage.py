"""API coverage: upstream static AC quirks, legacy micro-average, dynamic probe + classification."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bridge.scoring.coverage import (
    PROBE_SCRIPT,
    Endpoint,
    classify_probe,
    dynamic_api_coverage,
    extract_endpoints,
    legacy_micro_average,
    looks_like_default_not_found,
    probeable_endpoints,
    static_api_coverage,
    upstream_api_coverage,
)
from bridge.scoring.result import APICoverage
from tests.loopback import LoopbackServer


def _keys(eps: list[Endpoint]) -> list[str]:
    return [e.key for e in eps]


# ----------------------------------------------------------------------------- extractor


def test_extract_endpoint_lines_and_path_stops() -> None:
    readme = textwrap.dedent(
        """\
        ## API
        GET /items/:id - fetch one item
        POST /rock-paper: play
        DELETE /users/{id} - remove a user
        `PUT /notes/{id}` update a note
        **PATCH /todo/{id}** patch
        GET /items/:id - duplicate, first wins
        """
    )
    eps = extract_endpoints(readme)
    assert _keys(eps) == ["GET:/items/", "POST:/rock", "DELETE:/users/{id}", "PUT:/notes/{id}", "PATCH:/todo/{id}"]
    assert eps[0].description == "id - fetch one item"


def test_extract_prose_and_end_of_file_backtrack() -> None:
    eps = extract_endpoints("you can get /users here\nGET /xy")
    # prose matches (case-insensitive); bare line at EOF loses the path's last character
    assert _keys(eps) == ["GET:/users", "GET:/x"]


def test_extract_table_rows() -> None:
    readme = textwrap.dedent(
        """\
        | Method | Path | Description |
        |--------|------|-------------|
        | GET | `/api/v1/games/{game_id}` | Get a game |
        | post | /api/v1/games | Create |
        """
    )
    assert _keys(extract_endpoints(readme)) == ["GET:/api/v1/games/{game_id}", "POST:/api/v1/games"]


def test_extract_fenced_block_and_dedup() -> None:
    readme = "```http\nGET /health - ok\n```\nGET /health - again\n"
    assert _keys(extract_endpoints(readme)) == ["GET:/health"]


def test_extract_fenced_block_end_backtrack_quirk() -> None:
    # Inside a block a bare `GET /health` is the end of the searched text, so (as at EOF) the
    # description steals the path's last character: upstream gets an extra `/healt` endpoint.
    readme = "```http\nGET /health\n```\n"
    assert _keys(extract_endpoints(readme)) == ["GET:/health", "GET:/healt"]


def test_feature_fallback_only_when_nothing_else() -> None:
    features = "# Features\n- User Login\n- Data Search\n- lowercase search\n"
    eps = extract_endpoints(features)
    assert _keys(eps) == ["FEATURE:User Login", "FEATURE:Data Search"]
    assert _keys(extract_endpoints(features + "GET /health - ok\n")) == ["GET:/health"]


def test_extract_nothing() -> None:
    assert extract_endpoints("just words\n") == []


# ----------------------------------------------------------------------------- matcher


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "repo"
    root.mkdir(exist_ok=True)
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_matcher_decorator_and_path(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"app/main.py": '@app.get("/items/{item_id}")\ndef get_item(item_id): ...\n'})
    ac = static_api_coverage("GET /items/{item_id} - one\nPOST /orders - create\n", repo)
    assert (ac.total_apis, ac.implemented_apis, ac.score) == (2, 1, 0.5)
    assert ac.endpoints[0].implemented and ac.endpoints[0].evidence == "app/main.py"
    assert not ac.endpoints[1].implemented


def test_matcher_w17_dict_get_with_path_part_counts(tmp_path: Path) -> None:
    # No route at all: a dict.get( plus the word "users" in the same file is enough upstream.
    repo = _repo(tmp_path, {"util.py": 'cfg = {}\nname = cfg.get("users_table")\n'})
    ac = static_api_coverage("GET /users - list users\n", repo)
    assert ac.implemented_apis == 1


def test_matcher_short_parts_need_full_path(tmp_path: Path) -> None:
    # parts of length <= 3 ("api", "v1", "ab") are no evidence; the full path must appear
    repo = _repo(tmp_path, {"a.py": "x = d.get('api')\n# v1 ab\n"})
    assert static_api_coverage("GET /api/v1/ab - x\n", repo).implemented_apis == 0
    (repo / "b.py").write_text("x = d.get('k')\nROUTE = '/api/v1/ab'\n")
    assert static_api_coverage("GET /api/v1/ab - x\n", repo).implemented_apis == 1


def test_matcher_placeholder_parts_ignored(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"a.py": "d.delete(1)  # {item_id}\n"})
    assert static_api_coverage("DELETE /ab/{item_id} - x\n", repo).implemented_apis == 0


def test_matcher_jaxrs_dollar_is_end_of_file(tmp_path: Path) -> None:
    end = _repo(tmp_path, {"R.java": "// /widgets\n@GET\n"})
    assert static_api_coverage("GET /widgets - list\n", end).implemented_apis == 1
    (end / "R.java").write_text("@GET\n// /widgets\nclass R {}\n")
    assert static_api_coverage("GET /widgets - list\n", end).implemented_apis == 0


def test_matcher_spring_and_methods_list(tmp_path: Path) -> None:
    repo = _repo(
        tmp_path,
        {
            "src/Ctl.java": '@PostMapping("/orders")\n',
            "views.py": '@bp.route("/carts", methods=["PATCH"])\n',
        },
    )
    ac = static_api_coverage("POST /orders - x\nPATCH /carts - y\n", repo)
    assert ac.implemented_apis == 2


def test_matcher_excluded_dirs_and_suffixes(tmp_path: Path) -> None:
    route = '@app.get("/things")\n'
    repo = _repo(
        tmp_path,
        {
            "tests/t.py": route,
            "node_modules/x.js": route,
            "sub/venv/y.py": route,
            "target/Z.java": route,
            "notes.txt": route,
            "UPPER.PY": route,
        },
    )
    readme = "GET /things - list\n"
    assert static_api_coverage(readme, repo).implemented_apis == 0
    (repo / "foo.egg-info").mkdir()
    (repo / "foo.egg-info" / "r.py").write_text(route)  # exact-name pruning only: counted
    assert static_api_coverage(readme, repo).implemented_apis == 1


def test_matcher_feature(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"auth.py": "def user_login():\n    pass\n"})
    ac = static_api_coverage("- User Login\n- Data Search\n", repo)
    assert [(e.path, e.implemented) for e in ac.endpoints] == [("User Login", True), ("Data Search", False)]


def test_matcher_skips_symlinks(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text('@app.get("/secret")\n')
    repo = _repo(tmp_path, {})
    (repo / "link.py").symlink_to(outside)
    assert static_api_coverage("GET /secret - x\n", repo).implemented_apis == 0


def test_no_endpoints_and_upstream_gate(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"a.py": "pass\n"})
    ac = static_api_coverage("nothing here\n", repo)
    assert ac.to_upstream() == {"total_apis": 0, "implemented_apis": 0, "score": 0.0} and ac.note
    assert upstream_api_coverage(tmp_path / "missing.md", repo) is None
    readme = tmp_path / "README.md"
    readme.write_text("GET /health - ok\n")
    assert upstream_api_coverage(readme, tmp_path / "no-repo") is None
    assert upstream_api_coverage(readme, repo).total_apis == 1


# ----------------------------------------------------------------------------- legacy


def test_legacy_micro_average() -> None:
    rows = [
        {"total_apis": 100, "implemented_apis": 70},
        {"total_apis": 15, "implemented_apis": 11},
        {"total_apis": 0, "implemented_apis": 0},
    ]
    assert legacy_micro_average(rows) == round(81 / 115, 4) == 0.7043
    assert legacy_micro_average([APICoverage(total_apis=4, implemented_apis=1, score=0.25)]) == 0.25
    assert legacy_micro_average([]) == 0.0


# ----------------------------------------------------------------------------- classification


@pytest.mark.parametrize(
    "status,body,expected",
    [
        (None, None, False),
        (200, "[]", True),
        (201, "", True),
        (302, "", True),
        (400, '{"error":"bad"}', True),
        (401, '{"detail":"Not authenticated"}', True),
        (403, "", True),
        (422, '{"detail":[{"loc":["body"]}]}', True),
        (500, "Internal Server Error", True),
        (404, '{"detail":"Item not found"}', True),
        (404, '{"error": "user 1 does not exist"}', True),
        (404, '{"detail":"Not Found"}', False),  # FastAPI default
        (404, "Not Found", False),  # Starlette plain
        (404, "", False),
        (
            404,
            "<!doctype html>\n<html lang=en>\n<title>404 Not Found</title>\n<h1>Not Found</h1>\n"
            "<p>The requested URL was not found on the server. If you entered the URL manually please "
            "check your spelling and try again.</p>\n",
            False,
        ),  # Werkzeug
        (
            404,
            '<!DOCTYPE HTML>\n<html lang="en">\n<head><title>Error response</title></head>\n'
            "<body><h1>Error response</h1><p>Error code: 404</p></body></html>",
            False,
        ),  # http.server
        (404, "<title>Page not found at /x</title>", False),  # Django debug
        (404, '{"timestamp":"2024","status":404,"error":"Not Found","path":"/x"}', False),  # Spring
        (405, '{"detail":"Method Not Allowed"}', False),
        (501, "Unsupported method ('PATCH')", False),
    ],
)
def test_classify_probe(status: int | None, body: str | None, expected: bool) -> None:
    assert classify_probe(status, body)[0] is expected


def test_classify_probe_control_catches_catch_all_404() -> None:
    body = '{"ok": false, "path": "/items/1"}'
    control = '{"ok": false, "path": "/nope"}'
    assert classify_probe(404, body, path="/items/1")[0] is True
    assert (
        classify_probe(404, body, path="/items/1", control_status=404, control_body=control, control_path="/nope")[0]
        is False
    )


def test_looks_like_default_not_found_keeps_custom_json() -> None:
    assert not looks_like_default_not_found('{"detail": "Not Found", "code": "E42"}')


# ----------------------------------------------------------------------------- probe script, for real


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    def _json(self, status: int, data: object) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path == "/items":
            self._json(200, [])
        elif self.path == "/items/1":
            self._json(404, {"detail": "Item not found"})
        elif self.path == "/users/rgbridge-probe":
            self._json(401, {"detail": "Not authenticated"})
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"null")
        if self.path == "/items" and body == {} and self.headers.get("Content-Type") == "application/json":
            self._json(422, {"detail": "name required"})
        else:
            self.send_error(404)


@pytest.fixture()
def local_service():
    with LoopbackServer(_Handler) as server:
        yield server.url


def test_probe_script_and_dynamic_coverage(tmp_path: Path, local_service: str) -> None:
    readme = textwrap.dedent(
        """\
        GET /items - list
        POST /items - create
        GET /items/{item_id} - one
        GET /users/{username} - profile
        DELETE /items/{item_id} - remove
        GET /missing - never routed
        - Some Feature Manage
        """
    )
    eps = extract_endpoints(readme)
    spec = tmp_path / "endpoints.json"
    spec.write_text(json.dumps(probeable_endpoints(eps) + [{"method": "FEATURE", "path": "x"}]))
    proc = subprocess.run(
        [sys.executable, str(PROBE_SCRIPT), str(spec), local_service],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PROBE_TIMEOUT": "2"},
    )
    assert proc.returncode == 0, proc.stderr
    probes = json.loads(proc.stdout)
    by = {(p["method"], p["path"]): p for p in probes}
    assert by[("GET", "/items/{item_id}")]["url_path"] == "/items/1"
    assert by[("GET", "/users/{username}")]["url_path"] == "/users/rgbridge-probe"
    assert by[("DELETE", "/items/{item_id}")]["status"] == 501
    assert by[("GET", "/missing")]["control_status"] == 404
    assert by[("FEATURE", "x")]["error"] == "not an HTTP endpoint"
    ac = dynamic_api_coverage(eps, probes)
    got = {(e.method, e.path): e.implemented for e in ac.endpoints}
    assert got == {
        ("GET", "/items"): True,
        ("POST", "/items"): True,  # 422: routed, the empty body was rejected
        ("GET", "/items/{item_id}"): True,  # custom 404
        ("GET", "/users/{username}"): True,  # 401
        ("DELETE", "/items/{item_id}"): False,  # 501 from http.server: no such method
        ("GET", "/missing"): False,  # default error page
    }
    assert (ac.total_apis, ac.implemented_apis, ac.score) == (6, 4, 0.6667)


def test_probe_connection_refused_counts_not_implemented(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    eps = [Endpoint("GET", "/health")]
    proc = subprocess.run(
        [sys.executable, str(PROBE_SCRIPT), json.dumps(probeable_endpoints(eps)), f"http://127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    probes = json.loads(proc.stdout)
    assert probes[0]["status"] is None and probes[0]["error"]
    ac = dynamic_api_coverage(eps, probes)
    assert ac.implemented_apis == 0 and ac.endpoints[0].evidence.startswith("no response")


def test_probe_script_usage_error() -> None:
    proc = subprocess.run([sys.executable, str(PROBE_SCRIPT)], capture_output=True, text=True, timeout=30, env={})
    assert proc.returncode == 2


def test_dynamic_without_probe_result() -> None:
    ac = dynamic_api_coverage([Endpoint("GET", "/a"), Endpoint("FEATURE", "X Login")], [])
    assert (ac.total_apis, ac.implemented_apis) == (2, 0) and ac.endpoints[0].evidence == "not probed"
    assert "not probeable" in ac.endpoints[1].evidence


def test_dynamic_and_static_agree_on_what_the_readme_lists(tmp_path) -> None:
    """Issue 9: a README listing 2 items (feature bullets, no `METHOD /path` line) gave static
    AC 2/2 but dynamic AC 0/0. Both denominators are now the README's item count."""
    readme = "# Svc\n\n## Features\n- User Login\n- Report Upload\n"
    (tmp_path / "app.py").write_text("def user_login():\n    pass\ndef report_upload():\n    pass\n")
    static = static_api_coverage(readme, tmp_path)
    endpoints = extract_endpoints(readme)
    dynamic = dynamic_api_coverage(endpoints, [])
    assert (static.total_apis, static.implemented_apis) == (2, 2)
    assert dynamic.total_apis == static.total_apis == 2
    assert [e.path for e in dynamic.endpoints] == [e.path for e in static.endpoints]
    down = dynamic_api_coverage(
        extract_endpoints("GET /a - x\nPOST /b - y\n"), [], unreachable="service did not deploy"
    )
    assert (down.total_apis, down.implemented_apis) == (2, 0)
