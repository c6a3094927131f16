"""Sessions: a task opened in a workspace, its working clock, recorder, submission and scoring.

Lifecycle (modelled on inspect_ai's human_cli): start → (pause/resume)* → submit | quit.
Everything a session knows is persisted in `recordings/<session-id>/session.json` and the
append-only `events.jsonl`, so a restarted server re-attaches to active sessions, reconciles
their workspaces, and resumes scoring jobs that were interrupted.

`SessionManager` holds the sessions of this process and is the one API of the session verbs; the
work of each step lives beside it: bridge/sessions/opening.py (start), timelimit.py (the
working-time limit), submission.py (submit), launch.py (where a job scores: a detached scoring
process, or the in-process mode of a grader given as a callable), jobs.py (the scoring job,
integrity seal, practice).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import subprocess
import threading
from pathlib import Path
from typing import Any, Literal

from bridge.errors import BridgeError, RecordingError, SessionError
from bridge.recording.clock import iso, utcnow
from bridge.sessions import contamination, jobs, opening, submission
from bridge.sessions import score_process as detached
from bridge.sessions.attach import META_DIR, is_session_id, recording_dir_for
from bridge.sessions.attempts import check_run_id
from bridge.sessions.calllog import log_call
from bridge.sessions.launch import ScoringMode, scoring_mode
from bridge.sessions.live import Session, recorded_session
from bridge.sessions.models import (
    SENTINEL,
    ClientInfo,
    ResultStatus,
    Scorer,
    SessionRecord,
    SessionStatus,
    Signal,
    SubmitReceipt,
    TaskSpec,
    TaskSummary,
    result_status,
)
from bridge.sessions.ownership import held_elsewhere
from bridge.sessions.rules import rules_text, task_spec, task_summary
from bridge.sessions.settings import SessionSettings
from bridge.sessions.slots import max_jobs
from bridge.sessions.timelimit import arm_timer, disarm_timer
from bridge.tasks.catalog import Catalog

log = logging.getLogger("bridge.sessions.manager")


class SessionManager:
    """The core API behind the MCP tools and the session CLI verbs."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        recordings_dir: Path,
        scorer: Scorer | None = None,
        settings: SessionSettings | None = None,
    ) -> None:
        """`scorer`: None scores with the Docker engine in detached scoring processes; a grader
        given as a callable scores in the in-process mode (bridge/sessions/launch.py), called
        `scorer(task, repo_dir, request, progress)`. `settings`: bridge/sessions/settings.py, its
        defaults when None."""
        self.settings = settings = settings if settings is not None else SessionSettings()
        if settings.attempts < 1:
            raise SessionError(f"--attempts must be at least 1 (got {settings.attempts})")
        max_jobs()  # a bad RGBRIDGE_MAX_JOBS is an error now, not at the first submit
        self.catalog = catalog
        self.named_run = bool(settings.run_id)
        self.run_id = (
            check_run_id(settings.run_id)
            if settings.run_id
            else f"{utcnow().strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(4)}"
        )
        self.recordings_dir = Path(recordings_dir).resolve()
        self.recordings_dir.mkdir(parents=True, exist_ok=True)
        #: the grader of the in-process mode; None: detached scoring processes
        self.in_process = scorer
        self.sessions: dict[str, Session] = {}
        self._lock = threading.RLock()
        self._closed = False
        if settings.reattach:  # a server start: what killed processes left in the temp folder goes first
            contamination.sweep_leftovers()
            detached.sweep_scratch()
            self.reattach_all()

    # ------------------------------------------------------------------ tasks
    def list_tasks(self) -> list[TaskSummary]:
        return [task_summary(t) for t in self.catalog]

    def get_task(self, task_id: str) -> TaskSpec:
        return task_spec(self.catalog.get(task_id))

    def rules(self, task_id: str) -> str:
        return rules_text(self.catalog.get(task_id))

    # ------------------------------------------------------------------ scoring
    @property
    def scoring_mode(self) -> ScoringMode:
        return scoring_mode(self.in_process)

    # ------------------------------------------------------------------ start
    def start(
        self,
        task_id: str,
        workspace: Path,
        *,
        mode: Literal["agent", "human"] = "agent",
        client: ClientInfo | None = None,
        allow_nonempty: bool = False,
        within: Path | None = None,
    ) -> SessionStatus:
        """Open a session. `within`: a root the final resolved workspace must stay inside
        (the MCP server's configured workspace), re-checked here at creation time."""
        task = self.catalog.get(task_id)
        workspace = opening.resolve_new_workspace(task, workspace, within, self.recordings_dir)
        with self._lock:
            attempt = opening.check_run_rules(  # before creating anything
                task,
                workspace,
                self.sessions.values(),
                recordings_dir=self.recordings_dir,
                run_id=self.run_id,
                named_run=self.named_run,
                attempts=self.settings.attempts,
            )
            session = opening.open_session(
                task,
                workspace,
                self.recordings_dir,
                allow_nonempty=allow_nonempty,
                mode=mode,
                client=client,
                attempt=attempt,
                run_id=self.run_id,
                settings=self.settings,
                on_sentinel=self._on_sentinel,
            )
            session.record.clock.start()
            session.events.append("clock_start", working_seconds=0.0)
            session.save()
            self._arm_timer(session)
            self.sessions[session.record.session_id] = session
            return session.status()

    # ------------------------------------------------------------------ lookup
    def active(self, workspace: Path | None = None) -> list[SessionStatus]:
        with self._lock:
            out = []
            for s in self.sessions.values():
                if workspace is not None and s.workspace != Path(workspace).resolve():
                    continue
                out.append(s.status())
            return out

    def resolve(self, session_id: str | None = None, workspace: Path | None = None) -> str:
        with self._lock:
            if session_id:
                if session_id not in self.sessions:
                    raise SessionError(f"unknown session {session_id!r}")
                return session_id
            candidates = list(self.sessions.values())
            if workspace is not None:
                ws = Path(workspace).resolve()
                candidates = [s for s in candidates if s.workspace == ws]
            if not candidates:
                raise SessionError("no active session: call start_task first")
            open_ones = [s for s in candidates if s.record.state in ("active", "paused")]
            pool = open_ones or candidates
            # The most recent session is the one a caller without an id means.
            return max(pool, key=lambda s: s.record.created_at).record.session_id

    def _get(self, session_id: str) -> Session:
        try:
            return self.sessions[session_id]
        except KeyError:
            raise SessionError(f"unknown session {session_id!r}") from None

    def status(self, session_id: str) -> SessionStatus:
        session = self._get(session_id)
        if session.handed_off:
            detached.refresh(session)
        with session.lock:
            self._flush(session)
            return session.status()

    @staticmethod
    def _flush(session: Session) -> None:
        """Every write made before the call is in the record (bridge/sessions/recorder.py flush)."""
        if session.recorder is not None and session.record.state in ("active", "paused"):
            with contextlib.suppress(OSError, RecordingError):  # a full disk: the status still answers
                session.recorder.flush()

    # ------------------------------------------------------------------ clock, notes
    def _require_open(self, session: Session, verb: str) -> None:
        state = session.record.state
        if state not in ("active", "paused"):
            raise SessionError(f"cannot {verb}: session {session.record.session_id} is already {state}")

    def pause(self, session_id: str) -> SessionStatus:
        session = self._get(session_id)
        with session.lock:
            self._require_open(session, "pause")
            self._flush(session)  # writes made before the pause are logged before its clock_stop
            if not session.record.clock.stop():
                return session.status("clock already paused")
            session.record.state = "paused"
            session.events.append("clock_stop", working_seconds=session.record.clock.elapsed())
            session.save()
            disarm_timer(session)
            return session.status("clock paused")

    def resume(self, session_id: str) -> SessionStatus:
        session = self._get(session_id)
        with session.lock:
            self._require_open(session, "resume")
            if not session.record.clock.start():
                return session.status("clock already running")
            session.record.state = "active"
            session.events.append("clock_start", working_seconds=session.record.clock.elapsed())
            session.save()
            self._arm_timer(session)
            return session.status("clock running")

    def note(self, session_id: str, text: str) -> SessionStatus:
        text = str(text)
        if not text.strip():
            raise SessionError("a note needs some text")
        if len(text) > 20_000:
            raise SessionError("a note is limited to 20,000 characters")
        session = self._get(session_id)
        with session.lock:
            session.record.notes += 1
            session.events.append("note", text=text, working_seconds=session.record.clock.elapsed())
            session.save()
            return session.status("note recorded")

    def log_call(
        self, session_id: str | None, tool: str, arguments: dict[str, Any], *, ok: bool, error: str | None = None
    ) -> None:
        """Log an MCP call into its session's recording (or the server log when there is none)."""
        target = self.sessions.get(session_id) if session_id else None
        with detached.logging_into(target) as events:
            log_call(events, self.recordings_dir / "server-calls.jsonl", tool, arguments, ok=ok, error=error,
                     session_id=session_id)  # fmt: skip

    # ------------------------------------------------------------------ practice mode
    def practice_check(self, session_id: str) -> dict[str, Any]:
        """Opt-in (practice mode only): deploy-only check of the current workspace state.

        It checkpoints the workspace, deploys that commit and reports DSR only; no golden test
        runs. It is recorded as a `practice_check` event so a reviewer sees it was used.
        """
        if not self.settings.practice:
            raise SessionError("practice checks are off: start the server with --practice to allow deploy-only checks")
        session = self._get(session_id)
        with session.lock:
            self._require_open(session, "run a practice check")
            assert session.recorder is not None
            ckpt = session.recorder.checkpoint("practice")
        return jobs.practice_check(session, ckpt.commit)

    # ------------------------------------------------------------------ time limit
    def _arm_timer(self, session: Session) -> None:
        arm_timer(session, self._on_time_limit)

    def _on_time_limit(self, session_id: str) -> None:
        try:
            self.submit(session_id, signal="time_limit")
        except BridgeError:
            pass

    def _on_sentinel(self, session_id: str) -> None:
        # Called from the recorder's thread: submit in another thread so the recorder can seal.
        def run() -> None:
            session = self.sessions.get(session_id)
            try:
                if session is not None:
                    (session.workspace / META_DIR / SENTINEL).unlink(missing_ok=True)
                self.submit(session_id, signal="sentinel")
            except BridgeError:
                pass

        threading.Thread(target=run, name=f"sentinel-{session_id}", daemon=True).start()

    # ------------------------------------------------------------------ submit / quit
    def submit(self, session_id: str, *, signal: Signal = "mcp") -> SubmitReceipt:
        session = self._get(session_id)
        with session.lock:
            self._require_open(session, "submit")
            disarm_timer(session)
            return submission.submit(
                session,
                signal=signal,
                settings=self.settings,
                on_limit=self._on_time_limit,
                in_process=self.in_process,
            )

    def result(self, session_id: str, *, wait_seconds: float = 0.0) -> ResultStatus:
        session = self.sessions.get(session_id)
        if session is None:  # e.g. finished before a restart: read it from its recording
            record, rec_dir = self.recorded(session_id)
            return result_status(record, rec_dir)
        if session.handed_off:
            if detached.orphaned(session):  # its scoring process died: resume the job now
                with self._lock, contextlib.suppress(BridgeError, OSError):
                    del self.sessions[session_id]
                    self._reattach(session.dir, only_open=False)
                session = self.sessions.setdefault(session_id, session)
            detached.wait(session, min(float(wait_seconds), 600.0))
        elif wait_seconds > 0 and session.record.job and session.record.job.state in ("queued", "running"):
            session.job_done.wait(timeout=min(float(wait_seconds), 600.0))
        with session.lock:
            return result_status(session.record, session.dir)

    def recorded(self, session_id: str) -> tuple[SessionRecord, Path]:
        """A session of the recordings folder that this process does not hold (read-only)."""
        return recorded_session(self.recordings_dir, session_id)

    def quit(self, session_id: str, reason: str = "") -> SessionStatus:
        session = self._get(session_id)
        with session.lock:
            self._require_open(session, "quit")
            rec = session.record
            disarm_timer(session)
            rec.clock.stop()
            if session.recorder is not None:
                try:
                    session.recorder.checkpoint("quit")
                except BridgeError as exc:
                    # the workspace was swapped or removed under the session: its last state
                    # cannot be read safely, which must not keep the user from leaving
                    session.events.append("recorder_error", error=f"quit checkpoint: {exc}")
                session.recorder.stop()
            rec.state = "quit"
            rec.quit_reason = reason or None
            rec.ended_at = iso(utcnow())
            session.events.append("quit", reason=reason, working_seconds=rec.clock.elapsed())
            session.save()
            jobs.seal_recording(session)
            return session.status("session ended without scoring")

    # ------------------------------------------------------------------ persistence
    def reattach_all(self) -> list[str]:
        """Re-open sessions left active by a previous process; resume interrupted jobs."""
        attached: list[str] = []
        for rec_dir in sorted(p for p in self.recordings_dir.iterdir() if is_session_id(p.name)):
            try:
                if self._reattach(rec_dir, only_open=False) is not None:
                    attached.append(rec_dir.name)
            except (BridgeError, OSError) as exc:
                log.warning("not re-attaching %s: %s", rec_dir.name, exc)
        return attached

    def attach(self, session_id: str) -> str:
        """Re-attach exactly one recorded session (what `rgbridge submit` acts on), or raise."""
        rec_dir = recording_dir_for(self.recordings_dir, session_id)
        if session_id in self.sessions:
            return session_id
        if held_elsewhere(rec_dir):
            raise SessionError(f"session {session_id} is owned by a running bridge process")
        if self._reattach(rec_dir, only_open=True) is None:
            raise SessionError(f"session {session_id} is not open")
        return session_id

    def _reattach(self, rec_dir: Path, *, only_open: bool) -> str | None:
        """Re-attach one recording (bridge/sessions/opening.py `reopen`); its id, or None."""
        session = opening.reopen(
            rec_dir,
            only_open=only_open,
            catalog=self.catalog,
            recordings_dir=self.recordings_dir,
            held=self.sessions,
            settings=self.settings,
            on_sentinel=self._on_sentinel,
            on_limit=self._on_time_limit,
            in_process=self.in_process,
        )
        if session is None:
            return None
        self.sessions[session.record.session_id] = session
        return session.record.session_id

    def close(self) -> None:
        """Stop recorders and timers; in-process jobs finish in their (non-daemon) threads."""
        if self._closed:
            return
        self._closed = True
        for session in list(self.sessions.values()):
            disarm_timer(session)
            if session.handed_off:  # its scoring process owns the recording now
                detached.finish_hand_off(session)
                continue
            if session.record.state in ("active", "paused") and session.recorder is not None:
                try:
                    session.recorder.checkpoint("server_stop")
                except Exception:  # closing must not fail on a vanished workspace
                    pass
                session.recorder.stop()
                session.events.append("detach", pid=os.getpid())
            if session.job_thread is None or not session.job_thread.is_alive():
                session.release()
                session.events.close()  # a running job still writes its score events

    def jobs_running(self) -> int:
        """Scoring jobs of this process not finished yet (running or waiting for a slot)."""
        return sum(1 for s in self.sessions.values() if s.job_thread is not None and s.job_thread.is_alive())

    def wait_jobs(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else utcnow().timestamp() + timeout
        for session in list(self.sessions.values()):
            remaining = None if deadline is None else max(0.0, deadline - utcnow().timestamp())
            if session.job_thread is not None:
                session.job_thread.join(remaining)
            elif session.score_process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    session.score_process.wait(remaining)
