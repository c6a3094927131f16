"""Issue 8, opening 8 (a, c): failures are states, not exceptions. A store or recordings write
that fails (disk full, read-only) leaves the session open, visible in task_status and
recoverable by submitting again; `kill -9` during the seal leaves a consistent clock."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

import bridge.sessions.live as session_module  # Session.save writes session.json
from bridge.errors import SessionError
from bridge.recording.clock import parse_iso
from bridge.recording.events import load_events
from bridge.sessions.live import load_record
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import SessionSettings
from bridge.tasks.catalog import Catalog
from mcp_server.server import build_server
from tests.helpers import CountingScorer, write_solution

REPO_ROOT = Path(__file__).resolve().parent.parent


def enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture()
def mgr(tmp_path: Path, tasks_dir: Path):
    m = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp_path / "rec",
        scorer=CountingScorer(),
        settings=SessionSettings(seal_quiet_seconds=0.2),
    )
    yield m
    m.close()


@pytest.mark.parametrize("where", ["seal", "save"])
def test_failed_store_write_leaves_session_open_and_retry_works(
    mgr: SessionManager, tmp_path: Path, tasks_dir: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    sid = mgr.start("kv-ledger", tmp_path / "ws").session_id
    write_solution(tasks_dir / "kv-ledger", tmp_path / "ws")
    session = mgr.sessions[sid]
    if where == "seal":
        monkeypatch.setattr(session.recorder, "seal", enospc)
    else:
        real_save = session_module.write_json_atomic
        calls = {"n": 0}

        def failing(path, data, **kw):
            if Path(path).name == "session.json" and data.get("state") == "submitted":
                calls["n"] += 1
                enospc()
            return real_save(path, data, **kw)

        monkeypatch.setattr(session_module, "write_json_atomic", failing)
    with pytest.raises(SessionError, match="still open") as info:
        mgr.submit(sid)
    assert "No space left" in str(info.value)
    status = mgr.status(sid)
    assert status.state == "active" and status.clock_running and status.submission is None
    assert status.failure and "No space left" in status.failure and status.scoring == "not_submitted"
    assert mgr.result(sid).state == "not_submitted"
    monkeypatch.undo()  # the disk has room again
    receipt = mgr.submit(sid)
    assert receipt.job_id
    assert mgr.result(sid, wait_seconds=20).state == "done"
    assert mgr.status(sid).failure is None
    record = load_record(Path(status.recording))
    assert record.state in ("submitted", "scored") and record.failure is None
    types = [e["type"] for e in load_events(Path(status.recording) / "events.jsonl")[0]]
    assert "submit_failed" in types and types.count("submit") == 1


def test_failed_submit_over_mcp_is_a_clear_error_and_visible(
    tmp_path: Path, tasks_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp_path / "rec",
        scorer=CountingScorer(),
        settings=SessionSettings(seal_quiet_seconds=0.2),
    )
    server = build_server(manager, default_workspace=tmp_path / "ws", environ={})

    async def go() -> None:
        async with Client(server, mode="legacy") as c:
            sid = (await c.call_tool("start_task", {"task_id": "kv-ledger"})).structured_content["session_id"]
            monkeypatch.setattr(manager.sessions[sid].recorder, "seal", enospc)
            res = await c.call_tool("submit_task", {})
            assert res.is_error and "internal error" not in res.content[0].text
            assert "still open" in res.content[0].text
            status = (await c.call_tool("task_status", {})).structured_content
            assert status["state"] == "active" and "No space left" in status["failure"]
            monkeypatch.undo()
            assert not (await c.call_tool("submit_task", {})).is_error

    try:
        anyio.run(go)
    finally:
        manager.wait_jobs(20)
        manager.close()


def test_full_disk_for_real(tmp_path: Path, tasks_dir: Path) -> None:
    """The recordings folder on a small tmpfs that is then filled: a real ENOSPC from git/json."""
    rec = tmp_path / "rec"
    rec.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(rec)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        manager = SessionManager(
            Catalog.from_options(tasks_dir),
            recordings_dir=rec,
            scorer=CountingScorer(),
            settings=SessionSettings(seal_quiet_seconds=0.2),
        )
        try:
            ws = tmp_path / "ws"
            sid = manager.start("kv-ledger", ws).session_id
            time.sleep(0.5)
            filler = rec / "filler"
            with filler.open("wb") as fh:  # fill the disk
                try:
                    while True:
                        fh.write(b"\0" * 65536)
                        fh.flush()
                except OSError:
                    pass
            (ws / "app.py").write_bytes(os.urandom(200_000).hex().encode())  # needs new objects
            with pytest.raises(SessionError, match="still open"):
                manager.submit(sid)
            assert manager.status(sid).state == "active" and manager.status(sid).failure
            filler.unlink()
            manager.submit(sid)
            assert manager.result(sid, wait_seconds=20).state == "done"
        finally:
            manager.wait_jobs(20)
            manager.close()
    finally:
        subprocess.run(["umount", "-l", str(rec)], capture_output=True)


KILL_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from bridge.tasks.catalog import Catalog
    from bridge.sessions.manager import SessionManager
    from bridge.sessions.settings import SessionSettings
    from tests.helpers import CountingScorer
    tasks, rec, ws, delay = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4])
    mgr = SessionManager(Catalog.from_options(tasks), recordings_dir=rec, scorer=CountingScorer(),
                         settings=SessionSettings(seal_quiet_seconds=delay, seal_max_wait=60))
    sid = mgr.start("kv-ledger", ws).session_id
    (ws / "app.py").write_text("print(1)\\n")
    time.sleep(0.5)
    print(sid, flush=True)
    mgr.submit(sid)  # killed somewhere in here
    print("submitted", flush=True)
    time.sleep(60)
""")


@pytest.mark.parametrize("delay", [0.05, 0.6, 1.5])
def test_kill_9_during_seal_leaves_clock_consistent(tmp_path: Path, tasks_dir: Path, delay: float) -> None:
    rec, ws = tmp_path / "rec", tmp_path / "ws"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, str(tasks_dir), str(rec), str(ws), "1.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO_ROOT,
    )
    sid = proc.stdout.readline().strip()
    assert sid, proc.stderr.read()
    time.sleep(delay)  # the seal waits ~1 s of quiet: kill before, during and around it
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    rec_dir = rec / sid
    json.loads((rec_dir / "session.json").read_text())  # never torn (atomic saves)
    killed_at = time.time()
    dead_events, _ = load_events(rec_dir / "events.jsonl")
    last_dead = dead_events[-1]["t"]
    time.sleep(1.0)  # time passes while no bridge runs: it must not count as work
    manager = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=rec,
        scorer=CountingScorer(),
        settings=SessionSettings(seal_quiet_seconds=0.2),
    )
    try:
        record = load_record(rec_dir)
        spans = record.clock.spans
        assert all(s.end for s in spans[:-1]), spans
        # the span the dead process left open ends at its last recorded event (or earlier, when
        # the dead process had stopped it itself), never at the restart
        dead_span = spans[0]
        assert dead_span.end is not None and parse_iso(dead_span.end) <= parse_iso(last_dead)
        assert parse_iso(dead_span.end).timestamp() <= killed_at
        if record.state == "active":  # re-attached: a new span starts now, the gap is not counted
            assert len(spans) == 2 and spans[1].end is None
            assert parse_iso(spans[1].start).timestamp() >= killed_at + 0.9
            manager.submit(sid)
            assert manager.result(sid, wait_seconds=20).state == "done"
        else:
            assert not record.clock.running
    finally:
        manager.wait_jobs(20)
        manager.close()


def test_time_limit_submit_refused_by_the_disk_retries_calmly(
    tmp_path: Path, tasks_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the time limit a failing submit is retried every few seconds, not in a tight loop."""
    import shutil

    custom = tmp_path / "tasks"
    shutil.copytree(tasks_dir / "kv-ledger", custom / "kv-ledger")
    toml = custom / "kv-ledger" / "task.toml"
    toml.write_text(toml.read_text().replace("session = 0", "session = 1"))
    manager = SessionManager(
        Catalog.from_options(custom),
        recordings_dir=tmp_path / "rec",
        scorer=CountingScorer(),
        settings=SessionSettings(seal_quiet_seconds=0.2),
    )
    try:
        sid = manager.start("kv-ledger", tmp_path / "ws").session_id
        monkeypatch.setattr(manager.sessions[sid].recorder, "seal", enospc)
        time.sleep(3.5)
        status = manager.status(sid)
        assert status.state == "active" and "No space left" in status.failure
        events, _ = load_events(Path(status.recording) / "events.jsonl")
        assert 1 <= sum(e["type"] == "submit_failed" for e in events) <= 2
        monkeypatch.undo()
        deadline = time.monotonic() + 15  # the next calm retry goes through
        while manager.status(sid).submission is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert manager.status(sid).submission.signal == "time_limit"
    finally:
        manager.wait_jobs(20)
        manager.close()
