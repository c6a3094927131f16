"""Scoring jobs of a session: one launcher and one slot discipline for both modes (at most
RGBRIDGE_MAX_JOBS at once on the machine, in the same flocked slots a detached scoring process
takes), and in-process jobs on non-daemon threads, so a process that ends finishes and seals the
scores it started instead of dropping them half-written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from bridge.errors import SessionError
from bridge.scoring.result import DSRResult, PassAt1, ProfileResult, ScoreResult
from bridge.sessions import slots
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import SessionSettings
from bridge.sessions.slots import DEFAULT_MAX_JOBS, max_jobs
from bridge.tasks.catalog import Catalog

REPO_ROOT = Path(__file__).resolve().parent.parent


def _result(task, snapshot_hash: str) -> ScoreResult:
    prof = ProfileResult(
        profile="strict",
        outcome="scored",
        dsr=DSRResult(success=True, message="gated"),
        pass_at_1=PassAt1.from_counts(1, 0, 0),
    )
    return ScoreResult(
        task_id=task.id,
        task_hash=task.content_hash,
        snapshot_hash=snapshot_hash,
        lang=task.lang,
        port=task.port,
        framework=task.framework,
        profiles={"strict": prof},
    )


class GatedScorer:
    """Scores only when let through; counts how many score at once."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.started: list[str] = []

    def __call__(self, task, repo_dir, request, progress):
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            who = repo_dir / "who.txt"
            self.started.append(who.read_text() if who.is_file() else repo_dir.name)
        try:
            assert self.gate.wait(60)
            result = _result(task, request.snapshot_hash)
            (request.output_dir / "result.json").write_text(result.model_dump_json(), encoding="utf-8")
            return result
        finally:
            with self.lock:
                self.running -= 1


def test_a_bad_job_limit_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tasks_dir: Path) -> None:
    monkeypatch.setenv("RGBRIDGE_MAX_JOBS", "many")
    with pytest.raises(SessionError, match="RGBRIDGE_MAX_JOBS"):
        max_jobs()
    with pytest.raises(SessionError, match="RGBRIDGE_MAX_JOBS"):
        SessionManager(Catalog.from_options(tasks_dir), recordings_dir=tmp_path / "rec")
    monkeypatch.setenv("RGBRIDGE_MAX_JOBS", "0")
    assert max_jobs() == 1
    monkeypatch.delenv("RGBRIDGE_MAX_JOBS")
    assert max_jobs() == DEFAULT_MAX_JOBS


def test_jobs_beyond_the_limit_wait_queued_and_all_finish(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tasks_dir: Path
) -> None:
    monkeypatch.setenv("RGBRIDGE_MAX_JOBS", "1")
    scorer = GatedScorer()
    mgr = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp_path / "rec",
        scorer=scorer,
        settings=SessionSettings(seal_quiet_seconds=0.2),
    )
    try:
        ids = []
        for name, task in (("first", "word-duel"), ("second", "kv-ledger"), ("third", "library-api")):
            ws = tmp_path / name
            status = mgr.start(task, ws)
            (ws / "who.txt").write_text(name)
            ids.append(status.session_id)
        for sid in ids:
            mgr.submit(sid)
        states = wait_for(lambda: [mgr.result(sid) for sid in ids], lambda states: waiting(states) == 2)
        assert len(scorer.started) == 1  # the first free slot goes first, in no promised order
        assert sorted(s.state for s in states) == ["queued", "queued", "running"]
        scorer.gate.set()
        mgr.wait_jobs(60)
        assert [mgr.result(sid).state for sid in ids] == ["done", "done", "done"]
        assert sorted(scorer.started) == ["first", "second", "third"] and scorer.peak == 1
    finally:
        scorer.gate.set()
        mgr.close()


def waiting(states: list) -> int:
    return sum(1 for s in states if s.state == "queued" and "waiting for a scoring slot" in (s.message or ""))


def wait_for(get, done, seconds: float = 60.0):
    """`get()` once `done` holds for it (polled), else its last value."""
    deadline = time.monotonic() + seconds
    value = get()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.1)
        value = get()
    return value


HOLD_SLOT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from bridge.sessions.slots import scoring_slot
    with scoring_slot(1, lambda: None, root=Path(sys.argv[1])):
        print("held", flush=True)
        sys.stdin.read()
    """
)


def test_an_in_process_job_waits_for_the_slot_another_process_holds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tasks_dir: Path
) -> None:
    """The in-process mode takes the machine-wide slots a detached scoring process takes: with one
    slot, held by another process, its job waits queued and says why; it scores once the slot
    is let go."""
    monkeypatch.setenv("RGBRIDGE_MAX_JOBS", "1")
    root = slots.slots_dir()  # this test's own folder (conftest)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_SLOT, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    scorer = GatedScorer()
    scorer.gate.set()
    mgr = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp_path / "rec",
        scorer=scorer,
        settings=SessionSettings(seal_quiet_seconds=0.2),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert mgr.scoring_mode == "in_process"
        sid = mgr.start("word-duel", tmp_path / "ws").session_id
        mgr.submit(sid)
        state = wait_for(lambda: mgr.result(sid), lambda s: waiting([s]) == 1, seconds=30)
        assert state.state == "queued" and "on this machine" in (state.message or ""), state
        time.sleep(1.5)  # several tries of the slots later, still nothing scored
        assert scorer.started == [] and mgr.result(sid).state == "queued"
        holder.communicate("", timeout=30)  # the other process lets its slot go
        mgr.wait_jobs(60)
        assert mgr.result(sid).state == "done" and len(scorer.started) == 1
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(10)
        mgr.close()


SLOW_SCORE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from bridge.scoring.result import DSRResult, PassAt1, ProfileResult, ScoreResult
    from bridge.sessions.manager import SessionManager
    from bridge.sessions.settings import SessionSettings
    from bridge.tasks.catalog import Catalog

    def scorer(task, repo_dir, request, progress):
        time.sleep(2.0)  # still scoring when the main thread returns
        prof = ProfileResult(profile="strict", outcome="scored", dsr=DSRResult(success=True, message="slow"),
                             pass_at_1=PassAt1.from_counts(1, 0, 0))
        result = ScoreResult(task_id=task.id, task_hash=task.content_hash, snapshot_hash=request.snapshot_hash,
                             lang=task.lang, port=task.port, framework=task.framework, profiles={"strict": prof})
        (request.output_dir / "result.json").write_text(result.model_dump_json(), encoding="utf-8")
        return result

    tasks, rec, ws = (Path(a) for a in sys.argv[1:4])
    mgr = SessionManager(Catalog.from_options(tasks), recordings_dir=rec, scorer=scorer,
                         settings=SessionSettings(seal_quiet_seconds=0.2, finish_jobs_at_exit=sys.argv[4] == "finish"))
    sid = mgr.start("word-duel", ws).session_id
    (ws / "app.py").write_text("print('hi')\\n")
    mgr.submit(sid)
    mgr.close()
    print(sid, flush=True)
    # the main thread ends here, the job still running
    """
)


def test_a_process_that_ends_finishes_and_seals_the_score_it_started(tmp_path: Path, tasks_dir: Path) -> None:
    rec = tmp_path / "rec"
    proc = subprocess.run(
        [sys.executable, "-c", SLOW_SCORE, str(tasks_dir), str(rec), str(tmp_path / "ws"), "finish"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        # its own cache, so its slots: the machine's may be held by other runs' engine scores
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "RGBRIDGE_CACHE": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stderr
    sid = proc.stdout.split()[-1]
    rec_dir = rec / sid
    kinds = [json.loads(line)["type"] for line in (rec_dir / "events.jsonl").read_text().splitlines()]
    assert "score" in kinds, kinds
    assert json.loads((rec_dir / "session.json").read_text())["job"]["state"] == "done"
    assert (rec_dir / "integrity.json").is_file()


def test_the_servers_lifespan_closes_the_manager_it_owns(tmp_path: Path, tasks_dir: Path) -> None:
    """`rgbridge serve` hands its manager to the MCP server: when the transport ends, the SDK's
    lifespan closes it (recorder checkpointed and stopped, session released)."""
    import anyio
    from mcp import Client

    from mcp_server.server import build_server

    def events(mgr: SessionManager, sid: str) -> list[str]:
        lines = (mgr.recordings_dir / sid / "events.jsonl").read_text().splitlines()
        return [json.loads(line)["type"] for line in lines]

    results = {}
    for owns in (True, False):
        mgr = SessionManager(
            Catalog.from_options(tasks_dir), recordings_dir=tmp_path / f"rec-{owns}", scorer=GatedScorer()
        )
        server = build_server(mgr, default_workspace=None, environ={}, owns_manager=owns)

        async def go(server=server, owns=owns) -> str:
            async with Client(server, mode="legacy") as c:
                res = await c.call_tool(
                    "start_task", {"task_id": "word-duel", "workspace": str(tmp_path / f"ws-{owns}")}
                )
                assert not res.is_error, res.content
                return res.structured_content["session_id"]

        try:
            sid = anyio.run(go)
            results[owns] = events(mgr, sid)
        finally:
            mgr.close()
    assert results[True][-1] == "detach" and "recorder_stopped" in results[True]
    assert "detach" not in results[False]  # not the server's to close


def test_a_process_told_not_to_finish_leaves_its_job_to_the_next_bridge(tmp_path: Path, tasks_dir: Path) -> None:
    """`rgbridge submit --timeout`: giving up waiting ends the process; the job is resumed later."""
    rec = tmp_path / "rec"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", SLOW_SCORE, str(tasks_dir), str(rec), str(tmp_path / "ws"), "leave"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        # its own cache, so its slots: the machine's may be held by other runs' engine scores
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "RGBRIDGE_CACHE": str(tmp_path / "cache")},
    )
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 30
    sid = proc.stdout.split()[-1]
    record = json.loads((rec / sid / "session.json").read_text())
    assert record["job"]["state"] in ("queued", "running")
    scorer = GatedScorer()
    scorer.gate.set()
    mgr = SessionManager(Catalog.from_options(tasks_dir), recordings_dir=rec, scorer=scorer)
    try:
        assert sid in mgr.sessions
        mgr.wait_jobs(60)
        assert mgr.result(sid).state == "done"
    finally:
        mgr.close()
