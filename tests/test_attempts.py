"""Issue 8, openings 7 and 8(b): one scored attempt per task per run by default (`--attempts N`
for more, each recorded as its own attempt, Pass@k where k > 1), no nested workspaces, and
results readable through MCP after a restart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from bridge.errors import PathError, SessionError
from bridge.sessions.answers import TaskResult
from bridge.sessions.attempts import pass_at_k, pass_at_k_table
from bridge.sessions.live import load_record
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import SessionSettings
from bridge.tasks.catalog import Catalog
from mcp_server.server import build_server
from tests.helpers import CountingScorer, write_solution

REPO_ROOT = Path(__file__).resolve().parent.parent


def manager(tmp: Path, tasks_dir: Path, **kw) -> SessionManager:
    return SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp / "rec",
        scorer=CountingScorer(),
        settings=SessionSettings(seal_quiet_seconds=0.2, **kw),
    )


def test_one_scored_attempt_per_task_by_default(tmp_path: Path, tasks_dir: Path) -> None:
    mgr = manager(tmp_path, tasks_dir)
    try:
        first = mgr.start("kv-ledger", tmp_path / "a")
        assert first.attempt == 1
        # while the first is open, and after it is submitted: no second session for the task
        with pytest.raises(SessionError, match="attempt"):
            mgr.start("kv-ledger", tmp_path / "b")
        assert not (tmp_path / "b").exists()
        write_solution(tasks_dir / "kv-ledger", tmp_path / "a")
        mgr.submit(first.session_id)
        assert mgr.result(first.session_id, wait_seconds=20).state == "done"
        with pytest.raises(SessionError, match="1 of 1 attempt"):
            mgr.start("kv-ledger", tmp_path / "c")
        assert not (tmp_path / "rec").joinpath("x").exists()
        # another task is its own attempt budget
        assert mgr.start("library-api", tmp_path / "d").attempt == 1
    finally:
        mgr.close()
    assert len([p for p in (tmp_path / "rec").iterdir() if (p / "session.json").is_file()]) == 2


def test_quit_session_uses_no_attempt(tmp_path: Path, tasks_dir: Path) -> None:
    mgr = manager(tmp_path, tasks_dir)
    try:
        sid = mgr.start("kv-ledger", tmp_path / "a").session_id
        mgr.quit(sid)
        again = mgr.start("kv-ledger", tmp_path / "b")
        assert again.attempt == 2  # numbered in order; the quit one used none of the budget
    finally:
        mgr.close()


@pytest.mark.parametrize("where", ["inside", "containing"])
def test_nested_or_overlapping_workspaces_are_refused(tmp_path: Path, tasks_dir: Path, where: str) -> None:
    mgr = manager(tmp_path, tasks_dir)
    try:
        outer = tmp_path / "outer"
        if where == "inside":
            mgr.start("kv-ledger", outer)
            target = outer / "sub"
        else:
            mgr.start("kv-ledger", outer / "inner")
            target = outer
        with pytest.raises(PathError, match="overlaps the workspace"):
            mgr.start("library-api", target, allow_nonempty=True)
        assert not (target / ".rgbridge" / "session.json").exists()
        if where == "inside":
            assert not target.exists()  # refused before anything was created
    finally:
        mgr.close()


def test_attempts_option_records_each_attempt_and_pass_at_k(tmp_path: Path, tasks_dir: Path) -> None:
    mgr = manager(tmp_path, tasks_dir, attempts=3)
    ids = []
    try:
        for i in range(3):
            ws = tmp_path / f"try{i}"
            st = mgr.start("kv-ledger", ws)
            assert st.attempt == i + 1
            if i == 1:  # only the second attempt "solves" it (one .py file = all tests pass)
                (ws / "app.py").write_text("print('ok')\n")
            else:
                (ws / "notes.txt").write_text("nothing\n")
            mgr.submit(st.session_id)
            assert mgr.result(st.session_id, wait_seconds=20).attempt == i + 1
            ids.append(st.session_id)
        with pytest.raises(SessionError, match="3 of 3 attempt"):
            mgr.start("kv-ledger", tmp_path / "try3")
    finally:
        mgr.close()
    records = [load_record(tmp_path / "rec" / sid) for sid in ids]
    assert [r.attempt for r in records] == [1, 2, 3] and len({r.run_id for r in records}) == 1
    from bridge.reports.runreport import recording_report

    meta = recording_report(tmp_path / "rec" / ids[2])["metadata"]
    assert (meta["attempt"], meta["run_id"]) == (3, records[0].run_id)
    proc = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "session", "list", "--recordings", str(tmp_path / "rec"), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    listing = json.loads(proc.stdout)
    assert sorted(r["attempt"] for r in listing["sessions"]) == [1, 2, 3]
    (row,) = listing["pass_at_k"]
    # CountingScorer passes one test per .py file: only the second attempt solved the task
    assert (row["task_id"], row["n"], row["c"]) == ("kv-ledger", 3, 1)
    assert row["pass_at_k"] == {"1": 0.3333, "2": 0.6667, "3": 1.0}


def test_pass_at_k_estimator() -> None:
    assert pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)
    assert pass_at_k(3, 1, 3) == 1.0
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - (7 * 6) / (10 * 9))
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)
    rows = [{"run_id": "r", "task_id": "t", "summary": {"strict": {"passed": p, "total": 4}}} for p in (4, 1, 4, 0)]
    rows.append({"run_id": "other", "task_id": "t", "summary": {"strict": {"passed": 4, "total": 4}}})
    (table,) = pass_at_k_table(rows, "strict")  # the single-attempt run gets no Pass@k row
    assert (table["n"], table["c"]) == (4, 2)
    assert table["pass_at_k"]["1"] == 0.5 and table["pass_at_k"]["3"] == 1.0


def test_get_result_after_restart_reads_the_recording(tmp_path: Path, tasks_dir: Path) -> None:
    first = manager(tmp_path, tasks_dir)
    try:
        sid = first.start("kv-ledger", tmp_path / "ws").session_id
        write_solution(tasks_dir / "kv-ledger", tmp_path / "ws")
        first.submit(sid)
        assert first.result(sid, wait_seconds=20).state == "done"
    finally:
        first.close()
    second = manager(tmp_path, tasks_dir)
    server = build_server(second, default_workspace=None, environ={})

    async def go() -> dict:
        async with Client(server, mode="legacy") as c:
            res = await c.call_tool("get_result", {"session_id": sid})
            assert not res.is_error, res.content
            bad = await c.call_tool("get_result", {"session_id": "../" + sid})
            assert bad.is_error and "unknown session" in bad.content[0].text
            return res.structured_content

    try:
        out = anyio.run(go)
    finally:
        second.close()
    assert out["state"] == "done" and out["summary"]["strict"]["passed"] == 1 and out["attempt"] == 1
    # nothing more than before reaches the agent: same fields, no full result
    assert set(out) == set(TaskResult.model_fields)
    assert "result" not in out


def test_named_run_counts_attempts_across_restarts(tmp_path: Path, tasks_dir: Path) -> None:
    first = manager(tmp_path, tasks_dir, run_id="eval-run-1")
    try:
        sid = first.start("kv-ledger", tmp_path / "a").session_id
        first.submit(sid)
        first.result(sid, wait_seconds=20)
    finally:
        first.close()
    again = manager(tmp_path, tasks_dir, run_id="eval-run-1")  # the server restarted, same run
    try:
        with pytest.raises(SessionError, match="1 of 1 attempt"):
            again.start("kv-ledger", tmp_path / "b")
        with pytest.raises(PathError, match="overlaps the workspace"):
            again.start("library-api", tmp_path / "a" / "inner")
    finally:
        again.close()
    fresh = manager(tmp_path, tasks_dir)  # an unnamed run is one process: a new run
    try:
        assert fresh.start("kv-ledger", tmp_path / "c").attempt == 1
    finally:
        fresh.close()
    with pytest.raises(SessionError, match="invalid run id"):
        manager(tmp_path, tasks_dir, run_id="../x")
