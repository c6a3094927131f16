"""An attempt whose agent submitted through its own server reads the result another process
scores (bridge/agents/attempt/lifecycle.py `scored_on_disk`).

Regression: the attempt read the job once, as soon as the agent's server had let the recording
go, and a scoring process that took the job up a moment later (load) left it `queued`: the row of a
submission scored 1.0 in both profiles was an infra_error "scoring failed" (seen in CI with the
real Codex through the gateway)."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from bridge.agents.attempt import lifecycle
from bridge.agents.attempt.lifecycle import Stopped, scored_on_disk
from bridge.recording.integrity import OWNER_LOCK
from bridge.sessions.models import Job, SessionRecord


def _write(rec: Path, job: Job) -> None:
    record = SessionRecord(
        format_version=1,
        session_id=rec.name,
        task_id="kv-ledger",
        task_hash="h",
        task_version="1",
        task_source="tasks",
        task_port=8000,
        workspace="/nonexistent",
        created_at="2026-12-07T00:00:00Z",
        state="submitted",
        job=job,
    )
    tmp = rec / "session.json.tmp"
    tmp.write_text(record.model_dump_json(), encoding="utf-8")
    os.replace(tmp, rec / "session.json")


@pytest.fixture()
def rec(tmp_path: Path) -> Path:
    folder = tmp_path / "20261207T000000Z-kv-ledger-abcdef"
    folder.mkdir()
    _write(folder, Job(job_id="j1", state="queued"))
    return folder


def _later(seconds: float, action: object) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        action()  # type: ignore[operator]

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_job_not_yet_taken_up_is_waited_for(rec: Path) -> None:
    ended = Job(job_id="j1", state="failed", message="scoring failed", error="RuntimeError: engine gone")
    writer = _later(0.6, lambda: _write(rec, ended))
    started = time.monotonic()
    status = scored_on_disk(rec, threading.Event(), time.monotonic() + 60)
    writer.join()
    assert status.state == "failed" and status.message == "RuntimeError: engine gone"
    assert time.monotonic() - started >= 0.5


def test_a_held_recording_is_waited_for_until_released(rec: Path) -> None:
    _write(rec, Job(job_id="j1", state="failed", message="scoring failed", error="x"))
    fd = os.open(rec / OWNER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the scoring process, sealing after its result shows
    released = threading.Event()

    def release() -> None:
        released.set()
        os.close(fd)

    unlocker = _later(0.6, release)
    status = scored_on_disk(rec, threading.Event(), time.monotonic() + 60)
    unlocker.join()
    assert released.is_set() and status.state == "failed"


def test_a_job_no_process_takes_up_is_given_up(rec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "HANDOVER_SECONDS", 0.5)
    started = time.monotonic()
    status = scored_on_disk(rec, threading.Event(), time.monotonic() + 60)
    assert status.state == "queued" and 0.4 <= time.monotonic() - started < 30


def test_a_stopped_run_stops_waiting(rec: Path) -> None:
    stop = threading.Event()
    stopper = _later(0.3, stop.set)
    with pytest.raises(Stopped):
        scored_on_disk(rec, stop, time.monotonic() + 60)
    stopper.join()
