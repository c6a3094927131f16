"""A session's scoring job: the one code path that scores a submitted snapshot once a job is
started, whichever mode started it (bridge/sessions/launch.py), its persisted state, the
integrity seal of a finished recording, and practice mode's deploy-only check.

`score_in_slot` waits for one of the machine-wide scoring slots (bridge/sessions/slots.py), then
`run_job` checks the submission out, asks the Scorer for a score with a `ScoreRequest`, and
records it. The job's state (`queued|running|done|failed`, progress message, result folder) is
saved in session.json as it changes, so `get_result` and a restarted process see it. A job
failure is recorded (`score_failed`, `results/job-<id>-error.txt`), never raised.
"""

from __future__ import annotations

import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bridge.fs.files import write_json_atomic
from bridge.recording import integrity
from bridge.recording.clock import iso, utcnow
from bridge.recording.store import ShadowStore
from bridge.scoring.result import summarize_result
from bridge.scoring.types import ScoreRequest, profile_choice
from bridge.sessions.live import Session
from bridge.sessions.models import Scorer
from bridge.sessions.slots import max_jobs, scoring_slot


@contextmanager
def checked_out(store: ShadowStore, commit: str, prefix: str) -> Iterator[Path]:
    """A commit of the session's store written out to a fresh temporary folder, removed after."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        repo = Path(tmp) / "repo"
        store.checkout_to(commit, repo)
        yield repo


#: the longest run id of a session's scores: the `rgbridge.run_id` label of their containers and
#: images (`rgbridge cleanup --run-id`); the cap the engine always applied, so labels read as before
RUN_ID_MAX = 80


def score_run_id(session_id: str) -> str:
    """The run id of a session's scores: `session-<session id>`, capped at `RUN_ID_MAX`."""
    return f"session-{session_id}"[:RUN_ID_MAX]


def score_in_slot(session: Session, scorer: Scorer) -> None:
    """Wait for a machine-wide scoring slot (the job's message says so meanwhile), then score."""
    limit = max_jobs()
    message = f"waiting for a scoring slot ({limit} jobs score at once on this machine)"
    with scoring_slot(limit, lambda: set_job(session, message=message)):
        run_job(session, scorer)


def set_job(session: Session, **changes: Any) -> None:
    with session.lock:
        assert session.record.job is not None
        for key, value in changes.items():
            setattr(session.record.job, key, value)
        session.save()


def run_job(session: Session, scorer: Scorer) -> None:
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
            result = scorer(session.task, repo, request, progress)
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
