"""`rgbridge view`: the JSON API and the four pages over run folders built by hand (two finished
runs, one still going), the guard (Host, Origin, token), confinement of every path read, escaping,
`--export`; then in real headless Chromium: every page renders, hostile markup runs nothing, a run
going beside the view updates without a reload, and the exported bundle opens from disk."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from bridge.reports.stats import paired_difference, per_task_pass_at_1
from bridge.view.catalog import discover
from bridge.view.server import build_app
from tests.helpers import HtmlTags
from tests.view_runs import LiveRun, Served, all_cells, client, dom, finished_run, table_cells

SCORES_A = {"kv-ledger": [35, 35], "word-duel": [0, 10]}
SCORES_B = {"kv-ledger": [35, 0], "word-duel": [0, 0]}  # the flawed run


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, Any]:
    a = finished_run(tmp_path, "run-a", SCORES_A)
    b = finished_run(tmp_path, "run-b", SCORES_B, cost=0.3)
    live = LiveRun(tmp_path, ["kv-ledger", "word-duel"], 2)
    catalog = discover([a, b, live.dir])
    ids = {i.path.name: i.id for i in catalog.items}
    return {"a": a, "b": b, "live": live, "catalog": catalog, "ids": ids, "tmp": tmp_path}


def test_api_serves_runs_run_attempt_and_compare(runs: dict[str, Any]) -> None:
    c, ids = client(runs["catalog"]), runs["ids"]
    listed = {r["name"]: r for r in c.get("/api/runs").json()}
    assert set(listed) == {"run-a", "run-b", "live"}
    a = listed["run-a"]
    assert a["agent"] == "claude-code" and a["model"] == "claude-sonnet-4-5" and a["config_hash"] == "c0ffee-run-a"
    assert a["statistics"]["strict"]["pass_at_k"] == {"1": 0.5, "2": 0.5} and a["sandbox"] == "bwrap"
    assert a["cost_usd"] == pytest.approx(0.4) and a["outcomes"] == {"scored": 4}
    # one run: filtered and sorted
    detail = c.get(f"/api/runs/{ids['run-a']}", params={"task": "word", "sort": "pass"}).json()
    assert [r["key"] for r in detail["attempts"]] == ["word-duel.a2", "word-duel.a1"]
    slow = c.get(f"/api/runs/{ids['run-a']}", params={"over": "31.5", "sort": "time"}).json()["attempts"]
    assert [r["key"] for r in slow] == ["kv-ledger.a2", "word-duel.a2"]  # 32 s each, a1s took 31 s
    assert detail["counts"] == {"queued": 0, "running": 0, "scored": 4, "errored": 0} and not detail["going"]
    # one attempt: trajectory, file events with diffs, tests at submit, curve, recording files
    one = c.get(f"/api/runs/{ids['run-a']}/attempts/kv-ledger.a1").json()
    assert [s["step"] for s in one["steps"]] == [1, 2, 3] and one["steps"][1]["calls"][0]["name"].startswith("Write")
    assert one["files"] and any(f["diff"] and f["diff"].startswith("--- a/") for f in one["files"])
    assert one["entry"]["repo_name"] == "kv-ledger" and one["curve"]["points"]
    assert "events.jsonl" in one["recording_files"] and "agent/trajectory.json" in one["recording_files"]
    events = c.get(f"/api/runs/{ids['run-a']}/attempts/kv-ledger.a1/files/events.jsonl")
    assert events.status_code == 200 and events.headers["content-type"].startswith("text/plain")
    # compare: the paired numbers are the statistics module's
    both = c.get("/api/compare", params=[("run", ids["run-a"]), ("run", ids["run-b"])]).json()
    reports = [json.loads(next(runs[k].glob("report_*.json")).read_text())["results"] for k in ("a", "b")]
    want = paired_difference(per_task_pass_at_1(reports[1], "strict"), per_task_pass_at_1(reports[0], "strict"))
    (pair,) = both["paired"]
    assert want is not None and pair["difference"] == pytest.approx(want.difference) and pair["tasks"] == 2
    assert pair["p_value"] == pytest.approx(want.p_value) and pair["low"] <= pair["difference"] <= pair["high"]
    assert {"task": "kv-ledger", "pass_at_1": [1.0, 0.5]} in both["tasks"]
    # each run's per-task interval over its attempts: b's kv-ledger (1, 0) resamples to 0, .5 or 1
    assert both["intervals"][0]["kv-ledger"] == [1.0, 1.0] and both["intervals"][1]["kv-ledger"] == [0.0, 1.0]
    page = c.get("/compare", params=[("run", ids["run-a"]), ("run", ids["run-b"])]).text
    assert f"{want.difference:+.4f}" in page and f"{want.p_value:.4f}" in page
    # unknown things are 404s with a message, never a traceback
    assert (
        c.get("/api/runs/nope").status_code == 404 and c.get(f"/runs/{ids['run-a']}/attempts/x.a9").status_code == 404
    )
    assert c.get("/api/compare", params={"run": ids["run-a"]}).status_code == 404


def test_live_run_shows_queued_running_scored_errored(runs: dict[str, Any]) -> None:
    c, rid, live = client(runs["catalog"]), runs["ids"]["live"], runs["live"]
    assert c.get(f"/api/runs/{rid}/live").json()["counts"] == {"queued": 4, "running": 0, "scored": 0, "errored": 0}
    live.start("kv-ledger", 1, tool="mcp__repogenesis__submit")
    live.score("word-duel", 1, 35)
    live.error("word-duel", 2)
    data = c.get(f"/api/runs/{rid}/live").json()
    assert data["going"] and data["counts"] == {"queued": 1, "running": 1, "scored": 1, "errored": 1}
    rows = {r["key"]: r for r in data["rows"]}
    running = rows["kv-ledger.a1"]["cells"]
    assert running[1] == "running" and running[-1] == "mcp__repogenesis__submit" and running[7].endswith("s")
    assert rows["word-duel.a1"]["cells"][4] == "35/35 (1.0000)" and rows["word-duel.a2"]["cells"][3] == "rate_limit"
    # the running attempt's page: its steps so far, read from the agent's stream by its adapter
    one = c.get(f"/api/runs/{rid}/attempts/kv-ledger.a1").json()
    assert [call["name"] for s in one["steps"] for call in s["calls"]] == ["mcp__repogenesis__submit"]
    assert one["row"] is None and one["recording"] is None
    # a stream that is a symlink out of the served folders leads nowhere
    stream = live.folder("kv-ledger", 1) / "agent" / "stream.jsonl"
    outside = runs["tmp"] / "outside.jsonl"
    outside.write_text(stream.read_text().replace("mcp__repogenesis__submit", "OUTSIDE"))
    stream.unlink()
    stream.symlink_to(outside)
    assert c.get(f"/api/runs/{rid}/attempts/kv-ledger.a1").json()["steps"] == []


def test_guard_host_origin_token_and_headers(runs: dict[str, Any]) -> None:
    c = client(runs["catalog"])
    ok = c.get("/")
    assert ok.status_code == 200 and "script-src 'self'" in ok.headers["content-security-policy"]
    assert ok.headers["x-content-type-options"] == "nosniff" and ok.headers["x-frame-options"] == "DENY"
    # DNS rebinding: a page of evil.example resolving to 127.0.0.1 sends its own Host / Origin
    assert c.get("/api/runs", headers={"host": "evil.example:8765"}).status_code == 403
    assert c.get("/api/runs", headers={"origin": "http://evil.example:8765"}).status_code == 403
    assert c.get("/api/runs", headers={"origin": "null"}).status_code == 403
    assert c.get("/api/runs", headers={"origin": "http://127.0.0.1:8765"}).status_code == 200
    assert c.get("/api/runs", headers={"host": "localhost:8765"}).status_code == 200
    # beyond loopback: a token, once in the URL, then the cookie
    t = TestClient(build_app(runs["catalog"], host="10.1.2.3", token="s3cret"), base_url="http://10.1.2.3:8765")
    assert t.get("/api/runs").status_code == 401 and t.get("/api/runs?token=wrong").status_code == 401
    first = t.get("/?token=s3cret")
    assert first.status_code == 200 and "HttpOnly; SameSite=Strict" in first.headers["set-cookie"]
    assert t.get("/api/runs").status_code == 200  # the cookie
    bearer = TestClient(build_app(runs["catalog"], host="10.1.2.3", token="s3cret"), base_url="http://10.1.2.3:8765")
    assert bearer.get("/api/runs", headers={"authorization": "Bearer s3cret"}).status_code == 200
    assert (
        bearer.get("/api/runs", headers={"host": "127.0.0.1:8765", "authorization": "Bearer s3cret"}).status_code == 403
    )
    # a wildcard bind answers any name of the machine, with the token, and same-origin only
    wild = TestClient(build_app(runs["catalog"], host="0.0.0.0", token="s3cret"), base_url="http://box.lan:8765")
    assert wild.get("/api/runs").status_code == 401
    assert wild.get("/api/runs", headers={"authorization": "Bearer s3cret"}).status_code == 200
    evil = {"authorization": "Bearer s3cret", "origin": "http://evil.example"}
    assert wild.get("/api/runs", headers=evil).status_code == 403
    with pytest.raises(ValueError):
        build_app(runs["catalog"], host="0.0.0.0")


def test_cli_refuses_to_serve_beyond_loopback_without_a_token(runs: dict[str, Any], monkeypatch: Any) -> None:
    import uvicorn

    from bridge.cli import main

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(app=app, **kw))
    assert main(["view", str(runs["a"]), "--host", "0.0.0.0", "--port", "9000"]) == 0
    app = seen["app"]
    assert seen["host"] == "0.0.0.0" and app.token and len(app.token) >= 24  # made up, printed in the URL
    assert main(["view", str(runs["a"]), "--port", "9000"]) == 0
    assert seen["app"].token is None and seen["host"] == "127.0.0.1"


def test_no_path_outside_the_served_folders(runs: dict[str, Any], tmp_path: Path) -> None:
    import shutil

    from tests.view_runs import recording

    c, ids = client(runs["catalog"]), runs["ids"]
    base = f"/api/runs/{ids['run-a']}/attempts/kv-ledger.a1/files/"
    for name in (
        "..%2F..%2F..%2Fetc%2Fpasswd",
        "%2Fetc%2Fpasswd",
        "results%2F..%2F..%2Fsession.json",
        "store/HEAD",
        "agent/x",
    ):
        assert c.get(base + name).status_code == 404, name
    # a symlink in the recording leads nowhere, even to a name the view serves
    rec = next((runs["tmp"] / "run-a-recordings").rglob("sess"))
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    (rec / "agent" / "stderr.log").symlink_to(secret)
    (rec / "agent" / "trajectory.json").rename(rec / "agent" / "t.json")
    (rec / "agent" / "trajectory.json").symlink_to(secret)
    assert c.get(base + "agent/stderr.log").status_code == 404
    one = c.get(f"/api/runs/{ids['run-a']}/attempts/kv-ledger.a1").json()
    assert one["steps"] == [] and "TOP SECRET" not in json.dumps(one)
    # a report naming a recording outside the served folders (or another session's) gets none
    outside, sid = recording(tmp_path / "elsewhere" / "sess")
    report_path = next(runs["b"].glob("report_*.json"))
    report = json.loads(report_path.read_text())
    report["results"][0]["run"].update(recording=str(outside), session_id=sid)
    report["results"][1]["run"].update(recording=str(rec) + "/../sess/../../../../elsewhere/sess", session_id=sid)
    report_path.write_text(json.dumps(report))
    for key in ("kv-ledger.a1", "kv-ledger.a2"):
        got = c.get(f"/api/runs/{ids['run-b']}/attempts/{key}").json()
        assert got["recording"] is None and got["steps"] == [] and got["files"] == [], key
    # a symlinked folder inside a served folder is not served
    holder = tmp_path / "holder"
    holder.mkdir()
    shutil.copytree(runs["a"], holder / "real-run")
    (holder / "linked").symlink_to(runs["b"], target_is_directory=True)
    assert [i.path.name for i in discover([holder]).items] == ["real-run"]


def _tags(page: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    parser = HtmlTags()
    parser.feed(page)
    return parser.tags


def test_recorded_markup_is_escaped_text(runs: dict[str, Any]) -> None:
    c, ids = client(runs["catalog"]), runs["ids"]
    page = c.get(f"/runs/{ids['run-a']}/attempts/kv-ledger.a1").text
    tags = _tags(page)
    assert [a for t, a in tags if t == "script"] == [[("src", "/view.js")]]
    assert not [t for t, _ in tags if t in ("img", "iframe", "object", "embed")]
    assert all(not k.startswith("on") for _, attrs in tags for k, _ in attrs)
    assert "&lt;script&gt;document.title=&#x27;PWNED&#x27;&lt;/script&gt;" in page and "&lt;img src=x onerror=" in page


def test_export_bundle_has_every_page_without_script(runs: dict[str, Any], tmp_path: Path) -> None:
    from bridge.cli import main

    out = tmp_path / "bundle"
    assert main(["view", str(runs["a"]), str(runs["b"]), "--export", str(out)]) == 0
    names = sorted(p.name for p in out.glob("*.html"))
    assert "index.html" in names and "compare.html" in names and sum(n.startswith("attempt-") for n in names) == 8
    assert sum(n.startswith("run-") for n in names) == 2
    for path in out.glob("*.html"):
        tags = _tags(path.read_text())
        assert not [t for t, _ in tags if t in ("script", "img", "iframe", "form")], path.name
        for tag, attrs in tags:
            for key, value in attrs:
                assert not key.startswith("on")
                if tag == "a" and key == "href":
                    assert value and (out / value).is_file(), (path.name, value)  # every link opens from disk
    assert json.loads((out / "api" / "compare.json").read_text())["paired"][0]["tasks"] == 2


# ----------------------------------------------------------------------------- real Chromium


@pytest.fixture
def browser_profile(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "chrome-profile"
    path.mkdir()
    yield path


def test_browser_every_page_renders_and_markup_runs_nothing(
    runs: dict[str, Any], chromium: str, browser_profile: Path
) -> None:
    ids = runs["ids"]
    with Served(runs["catalog"]) as srv:
        pages = {
            "runs": ("/", "Runs"),
            "run": (f"/runs/{ids['run-a']}", "Run run-a"),
            "attempt": (f"/runs/{ids['run-a']}/attempts/kv-ledger.a1", "Attempt kv-ledger.a1"),
            "compare": (f"/compare?run={ids['run-a']}&run={ids['run-b']}", "Compare run-a · run-b"),
        }
        for name, (path, title) in pages.items():
            got = dom(chromium, browser_profile, srv.url(path), budget_ms=2000)
            assert f"<title>{title}</title>" in got, name
            assert "<svg" in got, name
        attempt = dom(chromium, browser_profile, srv.url(pages["attempt"][0]), budget_ms=2000)
    # the hostile steps are on the page as text, and nothing of theirs ran
    assert "PWNED" not in attempt.split("</title>")[0]
    assert "<img" not in attempt and "&lt;img src=x onerror=" in attempt
    assert "&lt;script&gt;document.title='PWNED'&lt;/script&gt;" in attempt
    assert [a for t, a in _tags(attempt) if t == "script"] == [[("src", "/view.js")]]


def test_browser_run_page_updates_without_reload(runs: dict[str, Any], chromium: str, browser_profile: Path) -> None:
    live, rid = runs["live"], runs["ids"]["live"]
    live.start("kv-ledger", 1)
    seen: list[str] = []

    def on_request(path: str) -> None:
        # the page was served with the run as it stood; the run moves on while it is open
        if path == f"/runs/{rid}" and not seen:
            seen.append(path)
            live.score("kv-ledger", 1, 35)
            live.start("word-duel", 1, tool="Bash")
            live.error("kv-ledger", 2)

    with Served(runs["catalog"], on_request) as srv:
        got = dom(chromium, browser_profile, srv.url(f"/runs/{rid}"), budget_ms=6000)
    assert seen
    rows = {cells[0]: cells for cells in table_cells(got, "attempts")}
    assert rows["kv-ledger.a1"][1] == "scored" and rows["kv-ledger.a1"][4] == "35/35 (1.0000)", rows
    assert rows["word-duel.a1"][1] == "running" and rows["word-duel.a1"][-1] == "Bash", rows
    assert rows["kv-ledger.a2"][3] == "rate_limit" and rows["word-duel.a2"][1] == "queued", rows
    assert 'id="count-scored">1<' in got and 'id="count-running">1<' in got


def test_browser_export_opens_from_disk_with_the_same_content(
    runs: dict[str, Any], chromium: str, browser_profile: Path, tmp_path: Path
) -> None:
    from bridge.view.bundle import export_bundle

    catalog = discover([runs["a"], runs["b"]])
    out = tmp_path / "bundle"
    export_bundle(catalog, out)
    c = client(catalog)
    a_id = next(i.id for i in catalog.items if i.path.name == "run-a")
    for served, file in [
        ("/", "index.html"),
        (f"/runs/{a_id}", f"run-{a_id}.html"),
        (f"/runs/{a_id}/attempts/kv-ledger.a1", f"attempt-{a_id}--kv-ledger.a1.html"),
    ]:
        from_disk = dom(chromium, browser_profile, (out / file).as_uri())
        served_page = c.get(served).text
        # the same tables, cell for cell, and the same sections
        assert all_cells(from_disk) == all_cells(served_page), file
        assert "<h1>" in from_disk and from_disk.count("<h2>") == served_page.count("<h2>"), file
        assert "<svg" in from_disk, file
    assert os.path.getsize(out / "compare.html") > 1000


def test_compare_lays_the_published_rows_beside(runs: dict[str, Any]) -> None:
    reference = Path(__file__).parent / "fixtures" / "leaderboard" / "results.json"
    ids = runs["ids"]
    c = client(runs["catalog"], reference=reference)
    page = c.get("/compare", params=[("run", ids["run-a"]), ("run", ids["run-b"])]).text
    assert page.count("<h2>Beside the reference rows</h2>") == 2 and "class='paper'" in page.replace('"', "'")
    assert (
        "Beside the reference rows"
        not in client(runs["catalog"]).get("/compare", params=[("run", ids["run-a"]), ("run", ids["run-b"])]).text
    )


def test_sandbox_and_network_badges_from_the_rows(tmp_path: Path) -> None:
    from bridge.view.catalog import Item
    from bridge.view.data import run_summary
    from bridge.view.pages import badges

    row = {"repo_name": "t", "run": {"sandbox": {"kind": "docker", "network": {"mode": "none"}}}}
    summary = run_summary(Item("x", tmp_path, "run"), {"metadata": {}, "results": [row]})
    assert summary["sandbox"] == "docker" and summary["network"] == "none" and not summary["unconfined"]
    assert "sandbox docker" in badges(summary) and "network none" in badges(summary)
    bare = run_summary(Item("y", tmp_path, "run"), {"metadata": {"sandbox": "none"}, "results": []})
    assert bare["unconfined"] and "badge warn'>unconfined" in badges(bare)
