"""Sessions: seeding, clock, notes, completion signals, persistence/re-attach, recording."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bridge.errors import PathError, SessionError
from bridge.recording.events import load_events
from bridge.recording.format import SUBMISSION_REF
from bridge.recording.store import ShadowStore
from bridge.scoring.result import ScoreResult
from bridge.scoring.types import ScoreRequest
from bridge.sessions.live import load_record
from bridge.sessions.manager import SessionManager
from bridge.sessions.models import ClientInfo
from bridge.sessions.settings import SessionSettings
from bridge.tasks.catalog import Catalog
from tests.helpers import CountingScorer, write_solution


@pytest.fixture()
def env(tmp_path: Path, tasks_dir: Path):
    catalog = Catalog.from_options(tasks_dir)
    scorer = CountingScorer()
    managers: list[SessionManager] = []

    def make(**kw) -> SessionManager:
        mgr = SessionManager(
            catalog,
            recordings_dir=tmp_path / "rec",
            scorer=scorer,
            settings=SessionSettings(seal_quiet_seconds=0.3, **kw),
        )
        managers.append(mgr)
        return mgr

    yield make, tmp_path, scorer
    for m in managers:
        m.close()


def test_start_seeds_readme_only_and_refuses_bad_workspaces(env, tasks_dir: Path) -> None:
    make, tmp, _ = env
    mgr = make(attempts=5)  # several starts of one task: the workspace checks are under test here
    ws = tmp / "ws"
    st = mgr.start("kv-ledger", ws, client=ClientInfo(name="pytest", version="1"))
    names = sorted(p.name for p in ws.iterdir())
    assert names == [".rgbridge", "README.md"]
    assert (ws / "README.md").read_bytes() == (tasks_dir / "kv-ledger" / "README.md").read_bytes()
    assert not any((ws).rglob("test_*.py")) and not (ws / "solution").exists()
    record = load_record(Path(st.recording))
    assert record.client.name == "pytest" and record.task_hash.startswith("sha256:")
    # second session in the same workspace, a non-empty workspace, a workspace inside the tasks dir
    with pytest.raises(SessionError, match="already has an open session"):
        mgr.start("kv-ledger", ws)
    other = tmp / "full"
    other.mkdir()
    (other / "x.py").write_text("print(1)\n")
    with pytest.raises(SessionError, match="not empty"):
        mgr.start("kv-ledger", other)
    with pytest.raises(PathError, match="overlaps"):
        mgr.start("kv-ledger", tasks_dir / "kv-ledger" / "ws")
    assert not (tasks_dir / "kv-ledger" / "ws").exists()  # refused before anything was created
    with pytest.raises(PathError, match="unexpanded"):
        mgr.start("kv-ledger", "${workspaceFolder}")
    with pytest.raises(Exception, match="unknown task"):
        mgr.start("no-such-task", tmp / "ws3")


def test_clock_notes_submit_and_recorded_submission(env, tasks_dir: Path) -> None:
    make, tmp, scorer = env
    mgr = make()
    ws = tmp / "ws"
    sid = mgr.start("kv-ledger", ws).session_id
    write_solution(tasks_dir / "kv-ledger", ws)
    mgr.pause(sid)
    paused_at = mgr.status(sid).working_seconds
    time.sleep(0.6)
    assert mgr.status(sid).working_seconds == pytest.approx(paused_at, abs=0.01)
    assert mgr.status(sid).state == "paused"
    mgr.resume(sid)
    mgr.note(sid, "switching to the counters endpoint")
    with pytest.raises(SessionError):
        mgr.note(sid, "   ")
    receipt = mgr.submit(sid)
    assert receipt.job_id and receipt.commit
    with pytest.raises(SessionError, match="already submitted"):
        mgr.submit(sid)
    result = mgr.result(sid, wait_seconds=30)
    assert result.state == "done" and result.summary["strict"]["passed"] == 1  # app.py
    record = load_record(Path(mgr.status(sid).recording))
    # The scorer is asked with the session's own id (the run id its containers are labelled with),
    # the session's profile, the job's result folder and the tree hash the recorder took.
    request = scorer.requests[-1]
    assert request.run_id == f"session-{sid}"[:80] and request.profile == "both" and request.use_cache
    assert request.output_dir == Path(record.workspace).parent / "rec" / sid / record.job.result_dir
    assert request.snapshot_hash == record.submission.tree_hash
    assert len(record.clock.spans) == 2 and all(s.end for s in record.clock.spans)
    # The store's submission commit equals the submitted tree byte for byte.
    store = ShadowStore(Path(mgr.status(sid).recording) / "store", ws)
    out = tmp / "replayed"
    store.checkout_to(store.resolve(SUBMISSION_REF), out)
    submitted = sorted(
        p.relative_to(ws).as_posix() for p in ws.rglob("*") if p.is_file() and ".rgbridge" not in p.parts
    )
    replayed = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert submitted == replayed
    for rel in submitted:
        assert filecmp.cmp(ws / rel, out / rel, shallow=False)
        assert os.stat(ws / rel).st_mode & 0o111 == os.stat(out / rel).st_mode & 0o111
    events, bad = load_events(Path(record.workspace).parent / "rec" / sid / "events.jsonl")
    types = [e["type"] for e in events]
    assert bad == 0
    for t in ("session_start", "clock_start", "clock_stop", "note", "submit", "score"):
        assert t in types
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


def test_sentinel_file_submits(env, tasks_dir: Path) -> None:
    make, tmp, _ = env
    mgr = make()
    ws = tmp / "ws"
    sid = mgr.start("kv-ledger", ws).session_id
    write_solution(tasks_dir / "kv-ledger", ws)
    (ws / ".rgbridge" / "SUBMIT").write_text("done\n")
    deadline = time.monotonic() + 20
    while mgr.status(sid).state == "active" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert mgr.status(sid).submission is not None
    assert mgr.status(sid).submission.signal == "sentinel"
    assert mgr.result(sid, wait_seconds=20).state == "done"


def test_time_limit_submits(env, tasks_dir: Path, tmp_path: Path) -> None:
    make, tmp, _ = env
    custom = tmp_path / "tasks"
    shutil.copytree(tasks_dir / "kv-ledger", custom / "kv-ledger")
    toml = custom / "kv-ledger" / "task.toml"
    toml.write_text(toml.read_text().replace("session = 0", "session = 1"))
    mgr = SessionManager(
        Catalog.from_options(custom),
        recordings_dir=tmp / "rec2",
        scorer=CountingScorer(),
        settings=SessionSettings(seal_quiet_seconds=0.2),
    )
    try:
        sid = mgr.start("kv-ledger", tmp / "ws").session_id
        deadline = time.monotonic() + 15
        while mgr.status(sid).submission is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert mgr.status(sid).submission.signal == "time_limit"
    finally:
        mgr.close()


def test_quit_and_errors_lose_nothing(env) -> None:
    make, tmp, _ = env
    mgr = make()
    ws = tmp / "ws"
    sid = mgr.start("kv-ledger", ws).session_id
    (ws / "app.py").write_text("print('hi')\n")
    log = Path(mgr.status(sid).recording) / "events.jsonl"
    time.sleep(0.8)
    before = log.read_bytes()
    mgr.log_call(sid, "submit_task", {"workspace": "../etc"}, ok=False, error="outside the workspace")
    mgr.quit(sid, reason="giving up")
    with pytest.raises(SessionError, match="already quit"):
        mgr.submit(sid)
    with pytest.raises(SessionError, match="unknown session"):
        mgr.status("nope")
    after = log.read_bytes()
    assert after.startswith(before) and len(after) > len(before)
    assert mgr.result(sid).state == "not_submitted"


def test_restart_reattaches_and_reconciles(env, tasks_dir: Path) -> None:
    make, tmp, _ = env
    first = make()
    ws = tmp / "ws"
    sid = first.start("kv-ledger", ws).session_id
    (ws / "a.py").write_text("A = 1\n")
    time.sleep(0.8)
    first.close()  # the server goes away (owner released)
    (ws / "made_while_down.py").write_text("B = 2\n")
    (ws / "a.py").write_text("A = 3\n")
    second = make()
    assert sid in second.sessions
    events, _ = load_events(Path(second.status(sid).recording) / "events.jsonl")
    synthetic = {e.get("path") for e in events if e.get("synthetic")}
    assert {"made_while_down.py", "a.py"} <= synthetic
    assert any(e["type"] == "reattach" for e in events)
    receipt = second.submit(sid)
    assert second.result(sid, wait_seconds=20).state == "done"
    assert receipt.commit


def test_cli_submit_outside_the_server(tmp_path: Path, tasks_dir: Path) -> None:
    """`rgbridge submit` with no live server re-attaches and scores in-process (here: strict)."""
    mgr = SessionManager(Catalog.from_options(tasks_dir), recordings_dir=tmp_path / "rec", scorer=CountingScorer())
    sid = mgr.start("kv-ledger", tmp_path / "ws").session_id
    mgr.close()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bridge.cli",
            "session",
            "status",
            "--workspace",
            str(tmp_path / "ws"),
            "--recordings",
            str(tmp_path / "rec"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["session_id"] == sid and data["state"] == "active" and not data["owned_by_live_process"]


def test_the_engines_scorer_scores_under_the_requests_run_id(
    tasks_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run id (the label of every container of the score) is the request's, not one rebuilt
    from where the output folder happens to sit; a tree-hash mismatch is noted beside the result."""
    from bridge.scoring.run import engine

    task = Catalog.from_options(tasks_dir).get("kv-ledger")
    seen: dict[str, object] = {}

    def fake_score_repo(task, repo_dir, request, options):
        seen.update(request=request, options=options)
        return ScoreResult(
            task_id=task.id,
            task_hash=task.content_hash,
            snapshot_hash="b" * 64,
            lang=task.lang,
            port=task.port,
            framework=task.framework,
            profiles={},
        )

    monkeypatch.setattr(engine, "score_repo", fake_score_repo)
    out = tmp_path / "elsewhere" / "out"
    out.mkdir(parents=True)
    request = ScoreRequest(
        run_id="session-abc", output_dir=out, snapshot_hash="a" * 64, profile="strict", use_cache=False
    )
    engine.default_scorer()(task, tmp_path, request, lambda _m: None)
    assert seen["request"] is request  # the session's request reaches the engine whole
    assert seen["options"].progress is not None
    assert "recorder tree hash " + "a" * 64 in (out / "snapshot-hash-note.txt").read_text()
    with pytest.raises(AttributeError):
        request.run_id = "other"  # type: ignore[misc]
