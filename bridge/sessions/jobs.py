"""The scoring hand-off of a session: the background job that scores a submitted snapshot, its
persisted state, the integrity seal of a finished recording, and practice mode's deploy-only check.

With the Docker engine a job runs in a detached scoring process (bridge/sessions/scorer.py, which
calls `run_job`); with a grader given as a callable (tests, embedders) it runs in a thread of
this process, and that grader reads the task's folders itself. The job's state
(`queued|running|done|failed`, progress message, result folder) is saved in session.json as it
changes, so `get_result` and a restarted process see it. A job failure is recorded
(`score_failed`, `results/job-<id>-error.txt`), never raised.

Jobs are bounded by `RGBRIDGE_MAX_JOBS` (default 2; each scoring run already keeps both profiles
busy, so more at once only slow each other down): detached scoring processes share machine-wide
slots (bridge/sessions/scorer.py); threads here wait for `JobSlots`, in submission order. Job
threads are not daemons: a process that is asked to end finishes and seals the scores it started
in threads instead of dropping them half-written (a killed process still leaves the job to be
resumed on the next start).
"""

from __future__ import annotations

import os
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bridge.errors import SessionError
from bridge.fs.files import write_json_atomic
from bridge.recording import integrity
from bridge.recording.clock import iso, utcnow
from bridge.recording.store import ShadowStore
from bridge.scoring.result import summarize_result
from bridge.scoring.types import ScoreRequest, profile_choice
from bridge.sessions.live import Session
from bridge.sessions.models import Scorer


@contextmanager
def checked_out(store: ShadowStore, commit: str, prefix: str) -> Iterator[Path]:
    """A commit of the session's store written out to a fresh temporary folder, removed after."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        repo = Path(tmp) / "repo"
        store.checkout_to(commit, repo)
        yield repo


DEFAULT_MAX_JOBS = 2
#: the longest run id of a session's scores: the `rgbridge.run_id` label of their containers and
#: images (`rgbridge cleanup --run-id`); the cap the engine always applied, so labels read as before
RUN_ID_MAX = 80


def score_run_id(session_id: str) -> str:
    """The run id of a session's scores: `session-<session id>`, capped at `RUN_ID_MAX`."""
    return f"session-{session_id}"[:RUN_ID_MAX]


def max_jobs() -> int:
    """How many scoring jobs run at once in this process (`RGBRIDGE_MAX_JOBS`, at least 1)."""
    raw = os.environ.get("RGBRIDGE_MAX_JOBS", "").strip()
    try:
        return max(1, int(raw)) if raw else DEFAULT_MAX_JOBS
    except ValueError:
        raise SessionError(f"RGBRIDGE_MAX_JOBS must be a whole number, not {raw!r}") from None


class JobSlots:
    """A first-come, first-served bound on the jobs scoring at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._cond = threading.Condition()
        self._running = 0
        self._next_ticket = 0
        self._serving = 0
        self._abandoned: set[int] = set()

    def ticket(self) -> int:
        with self._cond:
            self._next_ticket += 1
            return self._next_ticket - 1

    def must_wait(self, ticket: int) -> bool:
        """Whether the job holding ``ticket`` cannot start yet (jobs ahead of it or no free slot)."""
        with self._cond:
            return self._serving != ticket or self._running >= self.limit

    def abandon(self, ticket: int) -> None:
        """A ticket whose job never came to wait (its thread could not start): skipped."""
        with self._cond:
            self._abandoned.add(ticket)
            self._skip_abandoned()
            self._cond.notify_all()

    def _skip_abandoned(self) -> None:
        while self._serving in self._abandoned:
            self._abandoned.discard(self._serving)
            self._serving += 1

    @contextmanager
    def slot(self, ticket: int) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: self._serving == ticket and self._running < self.limit)
            self._serving += 1
            self._running += 1
            self._skip_abandoned()
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()


_slots_guard = threading.Lock()
_slots: JobSlots | None = None


def job_slots() -> JobSlots:
    """The process's job bound, read from the environment once, when the first job starts."""
    global _slots
    with _slots_guard:
        if _slots is None:
            _slots = JobSlots(max_jobs())
        return _slots


def launch_job(session: Session, scorer: Callable[[], Scorer], *, finish_at_exit: bool = True) -> None:
    """Score the session's submission in a background thread (`scorer()` is asked for there),
    once a job slot is free. `finish_at_exit`: the process waits for the job before it ends
    (a server); False leaves an unfinished job to be resumed by the next bridge that attaches
    the session (`rgbridge submit`, whose --timeout and Ctrl-C stop waiting)."""
    session.job_done.clear()
    slots = job_slots()
    ticket = slots.ticket()
    if slots.must_wait(ticket):
        set_job(session, message=f"waiting for a scoring slot ({slots.limit} jobs score at once)")

    def bounded() -> None:
        with slots.slot(ticket):
            run_job(session, scorer)

    # not a daemon: the interpreter waits for it at exit (module docstring)
    thread = threading.Thread(target=bounded, name=f"score-{session.record.session_id}", daemon=not finish_at_exit)
    session.job_thread = thread
    try:
        thread.start()
    except BaseException:
        slots.abandon(ticket)
        raise


def set_job(session: Session, **changes: Any) -> None:
    with session.lock:
        assert session.record.job is not None
        for key, value in changes.items():
            setattr(session.record.job, key, value)
        session.save()


def run_job(session: Session, scorer: Callable[[], Scorer]) -> None:
    rec = session.record
    assert rec.job is not None and rec.submission is not None
    job_id = rec.job.job_id
    out_dir = session.dir / "results" / f"submission-{job_id}"
    set_job(
        session,
        state="running",
        started_at=iso(utcnow()),
        message="preparing snapshot",
        result_dir=str(out_dir.relative_to(session.dir)),
    )
    session.events.append("score_start", job_id=job_id, profile=rec.job.profile)
    last = {"t": 0.0}

    def progress(message: str) -> None:
        with session.lock:
            if rec.job is not None:
                rec.job.message = message
        now = utcnow().timestamp()
        if now - last["t"] > 1.0:  # persist progress at most once a second
            last["t"] = now
            with session.lock:
                session.save()

    try:
        with checked_out(session.store, rec.submission.commit, "rgbridge-snap-") as repo:
            out_dir.mkdir(parents=True, exist_ok=True)
            request = ScoreRequest(
                run_id=score_run_id(rec.session_id),
                output_dir=out_dir,
                snapshot_hash=rec.submission.tree_hash,
                profile=profile_choice(rec.job.profile),
            )
            result = scorer()(session.task, repo, request, progress)
        summary = summarize_result(result.model_dump(mode="json"))
        with session.lock:
            rec.state = "scored"
        set_job(session, state="done", finished_at=iso(utcnow()), message="scoring finished")
        session.events.append("score", job_id=job_id, summary=summary)
    except Exception as exc:  # a job failure is recorded, never raised into a thread
        detail = f"{type(exc).__name__}: {exc}"
        (session.dir / "results").mkdir(exist_ok=True)
        (session.dir / "results" / f"job-{job_id}-error.txt").write_text(traceback.format_exc(), encoding="utf-8")
        set_job(session, state="failed", finished_at=iso(utcnow()), message="scoring failed", error=detail)
        session.events.append("score_failed", job_id=job_id, error=detail)
    finally:
        seal_recording(session)
        session.job_done.set()


def seal_recording(session: Session) -> None:
    """Write the recording's integrity file once it is final (scored, failed or quit)."""
    with session.lock:
        session.events.sync()
        error = integrity.try_seal(session.dir)  # never raises; also rewrites results/index.json
    if error:
        session.events.append("seal_failed", error=error)


def practice_check(session: Session, commit: str) -> dict[str, Any]:
    """Deploy a checkpoint commit and report DSR only (no golden test runs), recorded as a
    `practice_check` event and `results/practice-<time>/practice.json`."""
    from bridge.scoring.run.engine import deploy_check  # lazy: docker only when used

    out_dir = session.dir / "results" / f"practice-{utcnow().strftime('%Y%m%dT%H%M%S%f')}"
    with checked_out(session.store, commit, "rgbridge-practice-") as repo:
        result = deploy_check(session.task, repo, output_dir=out_dir)
    summary = {
        "commit": commit,
        "deployed": result.dsr.success,
        "message": result.dsr.message,
        "outcome": result.outcome,
        "time_to_ready": result.dsr.time_to_ready,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "practice.json", summary)
    session.events.append("practice_check", **summary)
    return summary
