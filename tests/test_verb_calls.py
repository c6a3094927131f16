"""What the verbs do beyond one manager call lives in the verb table (bridge/sessions/verbs.py),
not in an adapter: start hands over the new session before reading the rules, submit adds the
next step (and names the job when a session was already submitted), get_result long-polls and
reports progress as events, and the caller's surface comes from the CallContext."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from bridge.errors import SessionError
from bridge.scoring.types import ScoreRequest
from bridge.sessions.answers import StartTaskResult, SubmitResult, TaskResult
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import RecorderSettings, SessionSettings
from bridge.sessions.verbs import START, VERBS
from bridge.sessions.verbspec import CallContext, GivenWorkspace, Opened, Progress
from bridge.tasks.catalog import Catalog


class Done(BaseModel):
    profiles: dict[str, Any]


class GatedScorer:
    """Scores only once `release` is set, so a long poll has something to wait for."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self, task, repo_dir: Path, request: ScoreRequest, progress) -> Done:
        progress("waiting for the test to release the scorer")
        assert self.release.wait(30)
        result = Done(profiles={"strict": {"outcome": "scored", "dsr": {"success": True}}})
        (request.output_dir / "result.json").write_text(json.dumps(result.model_dump()), encoding="utf-8")
        return result


@pytest.fixture()
def scorer() -> GatedScorer:
    return GatedScorer()


@pytest.fixture()
def manager(tmp_path: Path, scorer: GatedScorer):
    mgr = SessionManager(
        Catalog.from_options(),
        recordings_dir=tmp_path / "rec",
        scorer=scorer,
        settings=SessionSettings(seal_quiet_seconds=0.2, recorder=RecorderSettings(settle_seconds=0.05)),
    )
    yield mgr
    scorer.release.set()
    mgr.wait_jobs(timeout=10)
    mgr.close()


def _open(manager: SessionManager, tmp_path: Path) -> str:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    context = CallContext(locate=lambda arg: GivenWorkspace(workspace, source="the test"))
    steps = START.steps(manager, None, context, task_id="kv-ledger")
    opened = next(steps)
    assert isinstance(opened, Opened) and opened.session_id in manager.sessions  # the adapter records its owner here
    with pytest.raises(StopIteration) as stop:
        next(steps)
    answer = stop.value.value
    assert isinstance(answer, StartTaskResult)
    assert answer.session_id == opened.session_id and answer.workspace_source == "the test"
    assert answer.rules == manager.rules("kv-ledger") and "submit_task" in answer.next_step
    return opened.session_id


def test_start_without_a_session_id_and_logged_without_one(manager: SessionManager, tmp_path: Path) -> None:
    _open(manager, tmp_path)
    assert START.logged_arguments(None, {"task_id": "kv-ledger"}) == {
        "task_id": "kv-ledger",
        "workspace": None,
        "mode": "agent",
    }


def test_submit_signal_comes_from_the_context_and_a_second_submit_names_the_job(
    manager: SessionManager, tmp_path: Path
) -> None:
    sid = _open(manager, tmp_path)
    receipt = VERBS["submit"].invoke(manager, sid, context=CallContext(signal="cli"))
    assert isinstance(receipt, SubmitResult) and receipt.job_id in receipt.next_step
    assert manager.status(sid).submission.signal == "cli"
    with pytest.raises(SessionError, match=f"its scoring job is {receipt.job_id}: call get_result"):
        VERBS["submit"].invoke(manager, sid)


def test_result_long_poll_reports_progress_then_answers(
    manager: SessionManager, tmp_path: Path, scorer: GatedScorer
) -> None:
    sid = _open(manager, tmp_path)
    early = VERBS["result"].invoke(manager, sid)
    assert isinstance(early, TaskResult) and early.state == "not_submitted" and "submit_task" in early.next_step
    VERBS["submit"].invoke(manager, sid)
    steps = VERBS["result"].steps(manager, sid, wait_seconds=20)
    first = next(steps)
    assert isinstance(first, Progress) and first.total == 20 and 0 <= first.elapsed < 20
    scorer.release.set()
    events: list[Any] = [first]
    while True:
        try:
            events.append(next(steps))
        except StopIteration as stop:
            answer = stop.value
            break
    assert all(isinstance(e, Progress) for e in events)
    assert isinstance(answer, TaskResult) and answer.state == "done"
    assert answer.next_step == "Scoring finished; the session is over."
    assert 0 < answer.waited_seconds < 20


def test_result_wait_is_capped(manager: SessionManager, tmp_path: Path) -> None:
    sid = _open(manager, tmp_path)
    VERBS["submit"].invoke(manager, sid)
    first = next(VERBS["result"].steps(manager, sid, wait_seconds=500))
    assert isinstance(first, Progress) and first.total == 50.0
