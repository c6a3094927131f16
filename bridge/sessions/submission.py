"""Submitting a session: the clock stops, the recorder seals a snapshot, session.json records the
submission and its job, and scoring starts in the background (bridge/sessions/jobs.py).

Failures are states, not lost sessions: when the store or recordings disk refuses a write, or the
workspace path no longer leads to the session's folder, the session stays open, the clock runs
on, `task_status` shows why, and submitting again retries.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from bridge.errors import PathError, RecordingError, SessionError
from bridge.recording.clock import iso, utcnow
from bridge.recording.format import SUBMISSION_REF
from bridge.sessions.launch import start_job
from bridge.sessions.live import Session
from bridge.sessions.models import (
    SUBMIT_RETRY_SECONDS,
    Job,
    Scorer,
    Signal,
    Submission,
    SubmitReceipt,
)
from bridge.sessions.settings import SessionSettings
from bridge.sessions.timelimit import arm_timer


def submit(
    session: Session,
    *,
    signal: Signal,
    settings: SessionSettings,
    on_limit: Callable[[str], None],
    in_process: Scorer | None,
) -> SubmitReceipt:
    """Submit an open session whose timer is disarmed; the caller holds `session.lock`.
    `settings` gives the seal's quiet time and wait, the profile and whether the process waits
    for the job at exit; `on_limit` re-arms the time limit if the submit fails; `in_process`:
    the grader of the in-process mode, None for a detached scoring process (bridge/sessions/launch.py)."""
    rec = session.record
    # The working time ends at the call; its `clock_stop` record is written once the recorder has
    # logged every write made before it (the seal, then the recorder's stop): no file event of
    # the session lands after the clock stops.
    rec.clock.stop()
    try:
        assert session.recorder is not None
        session.check_anchor()
        seal = session.recorder.seal(
            quiet_seconds=settings.seal_quiet_seconds, max_wait=settings.seal_max_wait, tag=SUBMISSION_REF
        )
        session.check_anchor()  # the snapshot was read from the session's own folder
        submission = Submission(
            signal=signal,
            at=iso(utcnow()),
            commit=seal.commit,
            tree_hash=seal.tree_hash,
            stable=seal.stable,
            seal_seconds=round(seal.seconds, 3),
            files=len(seal.manifest),
        )
        job = Job(job_id=secrets.token_hex(6), profile=settings.profile)
        saved = rec.model_copy(deep=True)
        rec.submission, rec.state, rec.ended_at, rec.job, rec.failure = (
            submission,
            "submitted",
            submission.at,
            job,
            None,
        )
        try:
            session.save()  # the submission exists once session.json says so
        except BaseException:
            session.record = rec = saved
            raise
    except (OSError, RecordingError, PathError) as exc:
        # A full or read-only store/recordings disk (git reports it as a RecordingError), or a
        # workspace path that no longer leads to the session's folder: the session stays
        # open, the clock runs on, task_status shows why, submitting again retries.
        raise submit_failed(session, exc, on_limit) from None
    session.recorder.stop()
    session.events.append("clock_stop", working_seconds=rec.clock.elapsed())
    session.events.append(
        "submit",
        signal=signal,
        commit=seal.commit,
        tree_hash=seal.tree_hash,
        stable=seal.stable,
        files=len(seal.manifest),
        working_seconds=rec.clock.elapsed(),
        job_id=job.job_id,
    )
    start_job(session, in_process, finish_at_exit=settings.finish_jobs_at_exit, hold_for_log=signal == "mcp")
    note = "" if seal.stable else " (workspace kept changing while sealing: snapshot marked unstable)"
    return SubmitReceipt(
        session_id=rec.session_id,
        job_id=job.job_id,
        commit=seal.commit,
        tree_hash=seal.tree_hash,
        stable=seal.stable,
        message=f"Submitted; scoring started as job {job.job_id}{note}. Call get_result until its state is done.",
    )


def submit_failed(
    session: Session, exc: OSError | RecordingError | PathError, on_limit: Callable[[str], None]
) -> SessionError:
    """Record why a submit failed and keep the session open; returns the error for the caller."""
    rec = session.record
    detail = (exc.strerror if isinstance(exc, OSError) else None) or str(exc).splitlines()[0][:300]
    reason = (
        f"submit refused: {detail}"
        if isinstance(exc, PathError)
        else f"submit failed: could not write the recording ({detail})"
    )
    rec.failure = reason
    if rec.state == "active":
        rec.clock.start()
        # past the time limit the timer retries the submit, but not in a tight loop
        arm_timer(session, on_limit, at_least=SUBMIT_RETRY_SECONDS)
    for step in (lambda: session.events.append("submit_failed", error=str(exc)[:500]), session.save):
        try:
            step()
        except OSError:
            pass  # the disk is still failing: the in-memory state is what task_status shows
    fix = "restore the workspace folder" if isinstance(exc, PathError) else "free space or fix the recordings folder"
    return SessionError(f"{reason}; the session is still open: {fix}, then call submit_task again")
