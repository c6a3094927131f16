"""Opening 9: golden tests and solutions sit in readable folders; an agent that reads them must
not go unnoticed. Real inotify, real processes reading files, and the real Docker engine for the
"the bridge's own scoring does not count" case."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bridge.recording.events import read_events
from bridge.reports.html import render_html
from bridge.reports.runreport import recording_report
from bridge.sessions import contamination, linux
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import SessionSettings
from bridge.tasks.catalog import Catalog
from tests.helpers import NullScorer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux-only")

TASK = "word-duel"


@pytest.fixture()
def task_copy(tmp_path: Path, tasks_dir: Path) -> Path:
    """A private copy of a shipped task: no other test or process touches its golden files."""
    dest = tmp_path / "tasks" / TASK
    shutil.copytree(tasks_dir / TASK, dest)
    return dest


def _manager(tmp_path: Path, task_dir: Path, name: str, **kw) -> SessionManager:
    catalog = Catalog.from_options(task_dir.parent)
    return SessionManager(
        catalog,
        recordings_dir=tmp_path / name,
        settings=SessionSettings(seal_quiet_seconds=0.3),
        **kw,
    )


def test_another_process_reading_a_golden_file_marks_the_session_contaminated(tmp_path: Path, task_copy: Path) -> None:
    mgr = _manager(tmp_path, task_copy, "rec", scorer=NullScorer())
    try:
        status = mgr.start(TASK, tmp_path / "ws")
        golden = task_copy / "tests" / "test_word_duel.py"
        solution = task_copy / "solution" / "game.py"
        # What an agent's shell does: another process opens and reads the files.
        subprocess.run(["cat", str(golden), str(solution)], check=True, stdout=subprocess.DEVNULL)
        # The README is given to the agent anyway: reading the task's copy is not evidence.
        subprocess.run(["cat", str(task_copy / "README.md")], check=True, stdout=subprocess.DEVNULL)
        mgr.submit(status.session_id)
        mgr.wait_jobs(60)
        result = mgr.result(status.session_id)
        assert result.state == "done"
        assert result.contaminated is True
        seen = {(e["path"], e["kind"]) for e in result.contamination}
        assert {(str(golden), "open"), (str(golden), "read"), (str(solution), "open"), (str(solution), "read")} <= seen
        assert all(e["at"] for e in result.contamination)
        assert not any(e["path"].endswith("README.md") for e in result.contamination)
        # The evidence is in the recording: the one-task report and the HTML page carry it.
        rec_dir = Path(status.recording)
        report = recording_report(rec_dir)
        assert report["metadata"]["contaminated"] is True
        assert report["results"][0]["contaminated"] is True
        assert str(golden) in {e["path"] for e in report["results"][0]["contamination"]}
        assert "contaminated" in render_html(rec_dir).lower()
        from bridge.recording.timeline import build_timeline

        timeline = build_timeline(rec_dir)
        assert timeline["contaminated"] is True
        assert any(i["type"] == "golden_access" and str(golden) in i["detail"] for i in timeline["incidents"])
        proc = subprocess.run(
            [sys.executable, "-m", "bridge.cli", "report", str(rec_dir)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert proc.returncode == 0, proc.stderr
        assert "CONTAMINATED" in proc.stdout and "golden files opened" in proc.stdout
    finally:
        mgr.close()


def test_a_session_with_no_golden_reads_is_clean_and_reads_after_submit_do_not_count(
    tmp_path: Path, task_copy: Path
) -> None:
    mgr = _manager(tmp_path, task_copy, "rec", scorer=NullScorer())
    try:
        status = mgr.start(TASK, tmp_path / "ws")
        (tmp_path / "ws" / "app.py").write_text("print('hi')\n")
        time.sleep(0.5)
        mgr.submit(status.session_id)
        # The session is no longer open: a later read is not this session's business.
        subprocess.run(["cat", str(task_copy / "tests" / "test_word_duel.py")], check=True, stdout=subprocess.DEVNULL)
        mgr.wait_jobs(60)
        result = mgr.result(status.session_id)
        assert result.state == "done"
        assert result.contaminated is False and result.contamination == []
        report = recording_report(Path(status.recording))
        assert report["metadata"]["contaminated"] is False
    finally:
        mgr.close()


def test_dataset_task_watches_the_whole_upstream_folder_but_not_what_the_agent_is_given(tmp_path: Path) -> None:
    root = tmp_path / "RepoGenesis"
    task = root / "repo" / "GameBackend"
    (task / "tests").mkdir(parents=True)
    (task / "tests" / "test_api.py").write_text("def test_x():\n    assert True\n")
    (task / "app").mkdir()
    (task / "app" / "main.py").write_text("# the reference implementation\n")
    (task / "README.md").write_text("# GameBackend\n")
    (task / "requirements.txt").write_text("flask\n")  # given to the agent as reference requirements
    catalog = Catalog.from_options(dataset_dir=root)
    mgr = SessionManager(
        catalog,
        recordings_dir=tmp_path / "rec",
        scorer=NullScorer(),
        settings=SessionSettings(seal_quiet_seconds=0.3),
    )
    try:
        status = mgr.start("GameBackend", tmp_path / "ws")
        subprocess.run(
            ["cat", str(task / "app" / "main.py"), str(task / "README.md"), str(task / "requirements.txt")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        mgr.quit(status.session_id)
        paths = {e["path"] for e in contamination.evidence(Path(status.recording))}
        assert paths == {str(task / "app" / "main.py")}
    finally:
        mgr.close()


def test_the_bridges_own_scoring_reads_never_count(tmp_path: Path, task_copy: Path, docker_client) -> None:
    """Session A stays open on the task while session B of the same task is scored by the real
    engine: B's golden files were read into memory before its watch started and its detached
    scoring process gets them through a pipe, so A's watch sees nothing and B is clean too."""

    solution = {
        p.relative_to(task_copy / "solution"): p.read_bytes()
        for p in (task_copy / "solution").rglob("*")
        if p.is_file()
    }
    mgr_b = _manager(tmp_path, task_copy, "rec-b")  # the Docker engine, in a detached scoring process
    mgr_a = _manager(tmp_path, task_copy, "rec-a", scorer=NullScorer())
    try:
        b = mgr_b.start(TASK, tmp_path / "ws-b")
        a = mgr_a.start(TASK, tmp_path / "ws-a")
        for rel, data in solution.items():
            (tmp_path / "ws-b" / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "ws-b" / rel).write_bytes(data)
        # A unique file: a new snapshot hash, so the engine's result cache cannot answer for it.
        (tmp_path / "ws-b" / "NOTES.md").write_text(f"run {time.time_ns()}\n")
        time.sleep(0.5)
        mgr_b.submit(b.session_id)
        result_b = mgr_b.result(b.session_id, wait_seconds=600)
        assert result_b.state == "done", result_b.message
        strict = result_b.summary["strict"]
        assert strict["passed"] == strict["total"] > 0  # the golden tests really ran
        assert result_b.contaminated is False
        mgr_a.quit(a.session_id)
        assert contamination.evidence(Path(a.recording)) == []
    finally:
        mgr_a.close()
        mgr_b.close()


def test_other_bridge_commands_loading_the_task_do_not_count(tmp_path: Path, task_copy: Path) -> None:
    """`rgbridge tasks list` (or a second server) loads the catalog while the agent works: the
    task's content hash comes from a stat-keyed cache (bridge/tasks/statcache.py), so no golden file is
    opened and the session stays clean."""
    mgr = _manager(tmp_path, task_copy, "rec", scorer=NullScorer())
    try:
        status = mgr.start(TASK, tmp_path / "ws")
        for argv in (
            ["tasks", "list", "--task-dir", str(task_copy.parent)],
            ["tasks", "show", TASK, "--task-dir", str(task_copy.parent)],
        ):
            proc = subprocess.run(
                [sys.executable, "-m", "bridge.cli", *argv], capture_output=True, text=True, check=False
            )
            assert proc.returncode == 0, proc.stderr
        mgr.quit(status.session_id)
        assert contamination.evidence(Path(status.recording)) == []
        # An edited golden file is a new signature: the hash is recomputed, not served stale.
        before = Catalog.from_options(task_copy.parent).get(TASK).content_hash
        with open(task_copy / "tests" / "test_word_duel.py", "a", encoding="utf-8") as fh:
            fh.write("\n# edited\n")
        assert Catalog.from_options(task_copy.parent).get(TASK).content_hash != before
    finally:
        mgr.close()


def test_the_watch_resumes_when_a_restarted_server_reattaches_the_session(tmp_path: Path, task_copy: Path) -> None:
    first = _manager(tmp_path, task_copy, "rec", scorer=NullScorer())
    status = first.start(TASK, tmp_path / "ws")
    first.close()  # server stop: the recorder and the watch stop with it
    second = _manager(tmp_path, task_copy, "rec", scorer=NullScorer())
    try:
        assert status.session_id in second.sessions
        golden = task_copy / "tests" / "requirements.txt"
        subprocess.run(["cat", str(golden)], check=True, stdout=subprocess.DEVNULL)
        second.quit(status.session_id)
        assert (str(golden), "open") in {(e["path"], e["kind"]) for e in contamination.evidence(Path(status.recording))}
    finally:
        second.close()


def test_get_result_over_real_mcp_stdio_reports_contamination(tmp_path: Path, task_copy: Path) -> None:
    """The agent-facing path: a real MCP client over stdio; a golden read during the session
    shows up in get_result as contaminated with the path as evidence."""
    import anyio
    from mcp import Client, StdioServerParameters, stdio_client

    ws, rec = tmp_path / "ws", tmp_path / "rec"
    env = {
        k: v for k, v in os.environ.items() if k not in ("RGBRIDGE_WORKSPACE", "CLAUDE_PROJECT_DIR", "RGBRIDGE_TOKEN")
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "bridge.cli",
            "serve",
            "--workspace",
            str(ws),
            "--recordings",
            str(rec),
            "--task-dir",
            str(task_copy.parent),
        ],
        env=env,
        cwd=str(Path(__file__).resolve().parent.parent),
    )
    golden = task_copy / "tests" / "test_word_duel.py"

    async def go() -> tuple[dict, dict]:
        with (tmp_path / "server.stderr").open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as c:
                await c.call_tool("start_task", {"task_id": TASK})
                clean = (await c.call_tool("get_result", {})).structured_content
                await anyio.run_process(["cat", str(golden)], check=True)
                dirty: dict = {}
                for _ in range(50):  # the watch thread records the access a moment later
                    dirty = (await c.call_tool("get_result", {})).structured_content
                    if dirty.get("contaminated"):
                        break
                    await anyio.sleep(0.1)
                await c.call_tool("quit_task", {})
                return clean, dirty

    clean, dirty = anyio.run(go)
    assert clean["contaminated"] is False and clean["contamination"] == []
    assert dirty["contaminated"] is True, dirty
    assert str(golden) in {e["path"] for e in dirty["contamination"]}


def test_without_inotify_the_session_runs_and_records_the_gap(
    tmp_path: Path, task_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off Linux (simulated: bridge/sessions/linux.py sees another platform) nothing is watched,
    and the recording says so."""
    monkeypatch.setattr(linux, "sys", SimpleNamespace(platform="darwin"))
    mgr = _manager(tmp_path, task_copy, "rec", scorer=NullScorer())
    try:
        status = mgr.start(TASK, tmp_path / "ws")
        mgr.quit(status.session_id)
        events = list(read_events(Path(status.recording) / "events.jsonl"))
        warnings = [e for e in events if e["type"] == contamination.WARNING_EVENT]
        assert warnings and "not watched" in warnings[0]["message"]
        assert contamination.evidence(Path(status.recording)) == []
    finally:
        mgr.close()
