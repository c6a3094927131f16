"""Sessions: a task opened in a workspace, its working clock, recorder, submission and scoring.

Lifecycle (modelled on inspect_ai's human_cli): start → (pause/resume)* → submit | quit.
Everything a session knows is persisted in `recordings/<session-id>/session.json` and the
append-only `events.jsonl`, so a restarted server re-attaches to active sessions, reconciles
their workspaces, and resumes scoring jobs that were interrupted.
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any, Literal

from bridge.errors import BridgeError, PathError, RecordingError, SessionError
from bridge.fs.anchor import (
    identity,
    identity_at,
    is_empty,
    open_workspace,
    replace_file,
    still_at,
    write_new,
)
from bridge.fs.files import write_json_atomic
from bridge.fs.hashing import EXCLUDED_DIRS
from bridge.recording import integrity
from bridge.recording.clock import iso, utcnow
from bridge.recording.events import EventLog
from bridge.scoring.result import summarize_result
from bridge.sessions import contamination
from bridge.sessions.attach import (
    MARKER,
    META_DIR,
    check_confined,
    check_recorded_workspace,
    is_session_id,
    marker_bytes,
    recording_dir_for,
)
from bridge.sessions.attempts import (
    HeldSession,
    check_not_nested,
    check_run_id,
    next_attempt,
    recorded_sessions_of_run,
)
from bridge.sessions.calllog import MAX_LOGGED_CHARS, capped_arguments, clip
from bridge.sessions.live import (
    Session,
    find_recording_for_workspace,
    load_record,
    owned_by_live_process,
)
from bridge.sessions.models import (
    IDE_FILES,
    SENTINEL,
    SUBMISSION_REF,
    SUBMIT_RETRY_SECONDS,
    ClientInfo,
    Job,
    Profile,
    ResultStatus,
    Scorer,
    SessionRecord,
    SessionStatus,
    Signal,
    Submission,
    SubmitReceipt,
    TaskSpec,
    TaskSummary,
    result_status,
)
from bridge.sessions.recorder import Recorder
from bridge.sessions.recovery import settle_orphaned_clock
from bridge.sessions.rules import rules_text
from bridge.tasks.catalog import Catalog
from bridge.tasks.model import Task

log = logging.getLogger("bridge.sessions.manager")


def _new_session_id(task_id: str) -> str:
    stamp = utcnow().strftime("%Y%m%dT%H%M%SZ")
    # ASCII only: the id must match bridge.sessions.attach.SESSION_ID_RE to be found again
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "-" for c in task_id)[:40] or "task"
    return f"{stamp}-{safe}-{secrets.token_hex(3)}"


class SessionManager:
    """The core API behind the MCP tools and the session CLI verbs."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        recordings_dir: Path,
        profile: Profile = "both",
        scorer: Scorer | None = None,
        practice: bool = False,
        settle_seconds: float = 0.3,
        seal_quiet_seconds: float = 1.0,
        seal_max_wait: float = 30.0,
        reattach: bool = True,
        attempts: int = 1,
        run_id: str | None = None,
    ) -> None:
        if attempts < 1:
            raise SessionError(f"--attempts must be at least 1 (got {attempts})")
        self.catalog = catalog
        self.attempts = attempts
        self.named_run = bool(run_id)
        self.run_id = (
            check_run_id(run_id) if run_id else f"{utcnow().strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(4)}"
        )
        self.recordings_dir = Path(recordings_dir).resolve()
        self.recordings_dir.mkdir(parents=True, exist_ok=True)
        self.profile = profile
        self.practice = practice
        self._scorer = scorer
        self.settle_seconds = settle_seconds
        self.seal_quiet_seconds = seal_quiet_seconds
        self.seal_max_wait = seal_max_wait
        self.sessions: dict[str, Session] = {}
        self._lock = threading.RLock()
        self._closed = False
        if reattach:
            self.reattach_all()

    # ------------------------------------------------------------------ tasks
    def list_tasks(self) -> list[TaskSummary]:
        return [
            TaskSummary(
                id=t.id,
                title=t.manifest.title,
                lang=t.lang,
                framework=t.framework,
                port=t.port,
                difficulty=t.manifest.difficulty,
            )
            for t in self.catalog
        ]

    def get_task(self, task_id: str) -> TaskSpec:
        task = self.catalog.get(task_id)
        return TaskSpec(
            id=task.id,
            title=task.manifest.title,
            lang=task.lang,
            framework=task.framework,
            port=task.port,
            difficulty=task.manifest.difficulty,
            readme=task.readme,
            rules=rules_text(task),
            seed_files=sorted(task.seed_files),
        )

    def rules(self, task_id: str) -> str:
        return rules_text(self.catalog.get(task_id))

    # ------------------------------------------------------------------ scoring
    @property
    def scorer(self) -> Scorer:
        if self._scorer is None:
            from bridge.scoring.engine import (
                default_scorer,  # lazy: docker only when scoring
            )

            self._scorer = default_scorer()
        return self._scorer

    # ------------------------------------------------------------------ start
    def _check_workspace(self, task: Task, workspace: Path) -> None:
        check_confined(task, workspace, self.recordings_dir)

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
        workspace = self._resolve_new_workspace(task, workspace, within)
        with self._lock:
            attempt = self._check_run_rules(task, workspace)  # before creating anything
            ws_fd = open_workspace(workspace)  # held: later checks and seed writes go through it
            try:
                self._check_free(workspace, ws_fd, allow_nonempty=allow_nonempty)
                session = self._new_session(task, workspace, mode=mode, client=client, attempt=attempt)
                try:
                    self._seed(session, ws_fd)
                    self._start_recorder(session)
                    assert session.recorder is not None
                    session.anchor = identity(ws_fd)
                    if session.recorder.root != workspace or not still_at(ws_fd, workspace):
                        raise PathError(
                            f"workspace {workspace} changed while the session was starting "
                            "(a folder on its path was replaced); nothing was started"
                        )
                except OSError as exc:  # e.g. the folder vanished under the recorder: a clear error
                    self._abort_start(session, exc)
                    raise PathError(
                        f"workspace {workspace} changed while the session was starting "
                        f"({exc.strerror or exc}); nothing was started"
                    ) from None
                except BaseException as exc:
                    self._abort_start(session, exc)
                    raise
            finally:
                os.close(ws_fd)
            session.record.clock.start()
            session.events.append("clock_start", working_seconds=0.0)
            session.save()
            self._arm_timer(session)
            self.sessions[session.record.session_id] = session
            return self._status(session)

    def _resolve_new_workspace(self, task: Task, workspace: Path | str, within: Path | None) -> Path:
        raw = str(workspace)
        if "${" in raw:
            raise PathError(f"workspace {raw!r} contains an unexpanded IDE variable")
        try:
            resolved = Path(os.path.realpath(os.path.expanduser(raw)))
        except OSError as exc:  # a path component changed while realpath read it (a race)
            raise PathError(f"workspace {raw} changed while it was being checked ({exc.strerror}); try again") from None
        if within is not None:
            root = Path(os.path.realpath(within))
            if not resolved.is_relative_to(root):
                raise PathError(f"workspace {raw} resolves to {resolved}, outside {root}")
        self._check_workspace(task, resolved)  # before creating anything
        return resolved

    def _check_run_rules(self, task: Task, workspace: Path) -> int:
        """Refuse a workspace nested with another of this run's, or a task out of attempts
        (bridge/sessions/attempts.py); returns the new session's attempt number."""
        for other in self.sessions.values():
            if other.workspace == workspace and other.record.state in ("active", "paused"):
                raise SessionError(f"workspace {workspace} already has an open session {other.record.session_id}")
        held = {
            s.record.session_id: HeldSession(
                session_id=s.record.session_id,
                task_id=s.record.task_id,
                workspace=s.workspace,
                state=s.record.state,
                submitted=s.record.submission is not None,
            )
            for s in self.sessions.values()
        }
        # A run id given on the command line spans processes: its sessions on disk count too.
        for item in recorded_sessions_of_run(self.recordings_dir, self.run_id, load_record) if self.named_run else []:
            held.setdefault(item.session_id, item)
        check_not_nested(workspace, list(held.values()))
        return next_attempt(task.id, list(held.values()), self.attempts)
        return next_attempt(task.id, held, self.attempts)

    def _check_free(self, workspace: Path, ws_fd: int, *, allow_nonempty: bool) -> None:
        """Refuse a workspace with an open recorded session, or a non-empty one."""
        existing = find_recording_for_workspace(self.recordings_dir, workspace)
        if existing is not None:
            rec = load_record(existing)
            if rec.state in ("active", "paused"):
                raise SessionError(
                    f"workspace {workspace} already has an open session {rec.session_id}; quit or submit it first"
                )
        if not allow_nonempty and not is_empty(ws_fd, IDE_FILES | {META_DIR} | EXCLUDED_DIRS):
            raise SessionError(
                f"workspace {workspace} is not empty; use an empty folder (or allow a non-empty one explicitly)"
            )

    def _new_session(
        self, task: Task, workspace: Path, *, mode: Literal["agent", "human"], client: ClientInfo | None, attempt: int
    ) -> Session:
        session_id = _new_session_id(task.id)
        rec_dir = self.recordings_dir / session_id
        rec_dir.mkdir(parents=True)
        record = SessionRecord(
            session_id=session_id,
            task_id=task.id,
            task_hash=task.content_hash,
            task_version=task.manifest.version,
            task_source=task.source,
            task_port=task.port,
            time_limit=task.manifest.timeouts.session,
            workspace=str(workspace),
            mode=mode,
            practice=self.practice,
            client=client or ClientInfo(),
            created_at=iso(utcnow()),
            run_id=self.run_id,
            attempt=attempt,
        )
        session = Session(record, rec_dir, task)
        session.claim()
        session.events.append(
            "session_start",
            session_id=session_id,
            task_id=task.id,
            task_hash=task.content_hash,
            mode=mode,
            client=record.client.model_dump(),
            workspace=str(workspace),
            run_id=self.run_id,
            attempt=attempt,
        )
        return session

    def _abort_start(self, session: Session, exc: BaseException) -> None:
        """A start that failed half-way leaves a closed recording (evidence), not an open session."""
        try:
            if session.recorder is not None:
                session.recorder.stop()
            session.record.state = "quit"
            session.record.quit_reason = f"start aborted: {exc}"[:500]
            session.record.ended_at = iso(utcnow())
            session.events.append("start_aborted", error=str(exc)[:500])
            session.save()
            session.release()
            session.events.close()
        except Exception:  # noqa: BLE001 - the original error is what the caller must see
            log.exception("could not record the aborted start of %s", session.record.session_id)

    def _seed(self, session: Session, ws_fd: int) -> None:
        """README, seed files and the marker, written through the held workspace fd (never by a
        path that could have been swapped for a symlink)."""
        task = session.task
        seeded: list[str] = []
        if write_new(ws_fd, "README.md", task.readme_path.read_bytes()):
            seeded.append("README.md")
        for name, source in sorted(task.seed_files.items()):
            if write_new(ws_fd, name, Path(source).read_bytes()):
                seeded.append(name)
        # Only the id: the recording is found under our recordings folder (bridge/sessions/attach.py).
        replace_file(ws_fd, f"{META_DIR}/{MARKER}", marker_bytes(session.record.session_id))
        session.events.append("seed", files=seeded)

    def _start_recorder(self, session: Session, *, resume: bool = False) -> None:
        sid = session.record.session_id
        head = session.store.head() if resume else None
        session.recorder = Recorder(
            session.workspace,
            event_log=session.events,
            store=session.store,
            settle_seconds=self.settle_seconds,
            on_sentinel=lambda: self._on_sentinel(sid),
            baseline=session.store.manifest_of(head) if head else None,
        )
        contamination.open_guard(session)  # stage golden files, then watch them until the recorder stops
        session.recorder.start()  # places watches, reconciles against disk, commits "start"

    # ------------------------------------------------------------------ lookup
    def active(self, workspace: Path | None = None) -> list[SessionStatus]:
        with self._lock:
            out = []
            for s in self.sessions.values():
                if workspace is not None and s.workspace != Path(workspace).resolve():
                    continue
                out.append(self._status(s))
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

    def _status(self, session: Session, message: str = "") -> SessionStatus:
        rec = session.record
        recorder = session.recorder
        return SessionStatus(
            session_id=rec.session_id,
            task_id=rec.task_id,
            state=rec.state,
            mode=rec.mode,
            workspace=rec.workspace,
            recording=str(session.dir),
            clock_running=rec.clock.running,
            working_seconds=round(rec.clock.elapsed(), 3),
            time_limit=rec.time_limit,
            files_changed=recorder.files_changed if recorder else 0,
            recorder_mode=recorder.mode if recorder else "stopped",
            recorder_degraded=recorder.degraded if recorder else None,
            submission=rec.submission,
            scoring=rec.job.state if rec.job else "not_submitted",
            job_id=rec.job.job_id if rec.job else None,
            attempt=rec.attempt,
            failure=rec.failure,
            message=message or (rec.failure or ""),
        )

    def status(self, session_id: str) -> SessionStatus:
        session = self._get(session_id)
        with session.lock:
            return self._status(session)

    # ------------------------------------------------------------------ clock, notes
    def _require_open(self, session: Session, verb: str) -> None:
        state = session.record.state
        if state not in ("active", "paused"):
            raise SessionError(f"cannot {verb}: session {session.record.session_id} is already {state}")

    def pause(self, session_id: str) -> SessionStatus:
        session = self._get(session_id)
        with session.lock:
            self._require_open(session, "pause")
            if not session.record.clock.stop():
                return self._status(session, "clock already paused")
            session.record.state = "paused"
            session.events.append("clock_stop", working_seconds=session.record.clock.elapsed())
            session.save()
            self._disarm_timer(session)
            return self._status(session, "clock paused")

    def resume(self, session_id: str) -> SessionStatus:
        session = self._get(session_id)
        with session.lock:
            self._require_open(session, "resume")
            if not session.record.clock.start():
                return self._status(session, "clock already running")
            session.record.state = "active"
            session.events.append("clock_start", working_seconds=session.record.clock.elapsed())
            session.save()
            self._arm_timer(session)
            return self._status(session, "clock running")

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
            return self._status(session, "note recorded")

    def log_call(
        self, session_id: str | None, tool: str, arguments: dict[str, Any], *, ok: bool, error: str | None = None
    ) -> None:
        """Log an MCP call into its session's recording (or the server log when there is none)."""
        safe_args = capped_arguments(arguments)
        error = clip(error, MAX_LOGGED_CHARS) if error is not None else None
        target = self.sessions.get(session_id) if session_id else None
        if target is None:
            log = EventLog(self.recordings_dir / "server-calls.jsonl")
            log.append("mcp_call", tool=tool, arguments=safe_args, ok=ok, error=error, session_id=session_id)
            log.close()
            return
        target.events.append("mcp_call", tool=tool, arguments=safe_args, ok=ok, error=error)

    # ------------------------------------------------------------------ practice mode
    def practice_check(self, session_id: str) -> dict[str, Any]:
        """Opt-in (practice mode only): deploy-only check of the current workspace state.

        It checkpoints the workspace, deploys that commit and reports DSR only; no golden test
        runs. It is recorded as a `practice_check` event so a reviewer sees it was used.
        """
        if not self.practice:
            raise SessionError("practice checks are off: start the server with --practice to allow deploy-only checks")
        session = self._get(session_id)
        with session.lock:
            self._require_open(session, "run a practice check")
            assert session.recorder is not None
            ckpt = session.recorder.checkpoint("practice")
        from bridge.scoring.engine import deploy_check  # lazy: docker only when used

        out_dir = session.dir / "results" / f"practice-{utcnow().strftime('%Y%m%dT%H%M%S%f')}"
        with tempfile.TemporaryDirectory(prefix="rgbridge-practice-") as tmp:
            repo = Path(tmp) / "repo"
            session.store.checkout_to(ckpt.commit, repo)
            result = deploy_check(session.task, repo, output_dir=out_dir)
        summary = {
            "commit": ckpt.commit,
            "deployed": result.dsr.success,
            "message": result.dsr.message,
            "outcome": result.outcome,
            "time_to_ready": result.dsr.time_to_ready,
        }
        out_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out_dir / "practice.json", summary)
        session.events.append("practice_check", **summary)
        return summary

    # ------------------------------------------------------------------ time limit
    def _arm_timer(self, session: Session, *, at_least: float = 0.0) -> None:
        self._disarm_timer(session)
        limit = session.record.time_limit
        if limit <= 0:
            return
        remaining = max(at_least, limit - session.record.clock.elapsed())
        sid = session.record.session_id
        timer = threading.Timer(remaining, lambda: self._on_time_limit(sid))
        timer.daemon = True
        session.timer = timer
        timer.start()

    @staticmethod
    def _disarm_timer(session: Session) -> None:
        if session.timer is not None:
            session.timer.cancel()
            session.timer = None

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
            rec = session.record
            self._disarm_timer(session)
            rec.clock.stop()
            try:
                session.events.append("clock_stop", working_seconds=rec.clock.elapsed())
                assert session.recorder is not None
                session.check_anchor()
                seal = session.recorder.seal(
                    quiet_seconds=self.seal_quiet_seconds, max_wait=self.seal_max_wait, tag=SUBMISSION_REF
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
                job = Job(job_id=secrets.token_hex(6), profile=self.profile)
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
                raise self._submit_failed(session, exc) from None
            session.recorder.stop()
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
            self._launch_job(session)
            note = "" if seal.stable else " (workspace kept changing while sealing: snapshot marked unstable)"
            return SubmitReceipt(
                session_id=session_id,
                job_id=job.job_id,
                commit=seal.commit,
                tree_hash=seal.tree_hash,
                stable=seal.stable,
                message=f"Submitted; scoring started as job {job.job_id}{note}. "
                "Call get_result until its state is done.",
            )

    def _submit_failed(self, session: Session, exc: OSError | RecordingError | PathError) -> SessionError:
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
            self._arm_timer(session, at_least=SUBMIT_RETRY_SECONDS)
        for step in (lambda: session.events.append("submit_failed", error=str(exc)[:500]), session.save):
            try:
                step()
            except OSError:
                pass  # the disk is still failing: the in-memory state is what task_status shows
        fix = (
            "restore the workspace folder" if isinstance(exc, PathError) else "free space or fix the recordings folder"
        )
        return SessionError(f"{reason}; the session is still open: {fix}, then call submit_task again")

    def _launch_job(self, session: Session) -> None:
        session.task = contamination.staged(session.task)  # a resumed job too scores from the staged copy
        session.job_done.clear()
        thread = threading.Thread(
            target=self._run_job, args=(session,), name=f"score-{session.record.session_id}", daemon=True
        )
        session.job_thread = thread
        thread.start()

    def _set_job(self, session: Session, **changes: Any) -> None:
        with session.lock:
            assert session.record.job is not None
            for key, value in changes.items():
                setattr(session.record.job, key, value)
            session.save()

    def _run_job(self, session: Session) -> None:
        rec = session.record
        assert rec.job is not None and rec.submission is not None
        job_id = rec.job.job_id
        out_dir = session.dir / "results" / f"submission-{job_id}"
        self._set_job(
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
            with tempfile.TemporaryDirectory(prefix="rgbridge-snap-") as tmp:
                repo = Path(tmp) / "repo"
                session.store.checkout_to(rec.submission.commit, repo)
                out_dir.mkdir(parents=True, exist_ok=True)
                result = self.scorer(
                    session.task,
                    repo,
                    profile=rec.job.profile,
                    output_dir=out_dir,
                    snapshot_hash=rec.submission.tree_hash,
                    progress=progress,
                )
            summary = summarize_result(result.model_dump(mode="json"))
            with session.lock:
                rec.state = "scored"
            self._set_job(session, state="done", finished_at=iso(utcnow()), message="scoring finished")
            session.events.append("score", job_id=job_id, summary=summary)
        except Exception as exc:  # noqa: BLE001 - a job failure is recorded, never raised into a thread
            detail = f"{type(exc).__name__}: {exc}"
            (session.dir / "results").mkdir(exist_ok=True)
            (session.dir / "results" / f"job-{job_id}-error.txt").write_text(traceback.format_exc(), encoding="utf-8")
            self._set_job(session, state="failed", finished_at=iso(utcnow()), message="scoring failed", error=detail)
            session.events.append("score_failed", job_id=job_id, error=detail)
        finally:
            self._seal(session)
            session.job_done.set()

    def result(self, session_id: str, *, wait_seconds: float = 0.0) -> ResultStatus:
        session = self.sessions.get(session_id)
        if session is None:  # e.g. finished before a restart: read it from its recording
            record, rec_dir = self.recorded(session_id)
            return result_status(record, rec_dir)
        if wait_seconds > 0 and session.record.job and session.record.job.state in ("queued", "running"):
            session.job_done.wait(timeout=min(float(wait_seconds), 600.0))
        with session.lock:
            return result_status(session.record, session.dir)

    def recorded(self, session_id: str) -> tuple[SessionRecord, Path]:
        """A session of the recordings folder that this process does not hold (read-only)."""
        try:
            rec_dir = recording_dir_for(self.recordings_dir, session_id)
            record = load_record(rec_dir)
        except SessionError:
            raise SessionError(f"unknown session {session_id!r}") from None
        if record.session_id != session_id:
            raise SessionError(f"unknown session {session_id!r}")
        return record, rec_dir

    def quit(self, session_id: str, reason: str = "") -> SessionStatus:
        session = self._get(session_id)
        with session.lock:
            self._require_open(session, "quit")
            rec = session.record
            self._disarm_timer(session)
            rec.clock.stop()
            if session.recorder is not None:
                session.recorder.checkpoint("quit")
                session.recorder.stop()
            rec.state = "quit"
            rec.quit_reason = reason or None
            rec.ended_at = iso(utcnow())
            session.events.append("quit", reason=reason, working_seconds=rec.clock.elapsed())
            session.save()
            self._seal(session)
            return self._status(session, "session ended without scoring")

    @staticmethod
    def _seal(session: Session) -> None:
        """Write the recording's integrity file once it is final (scored, failed or quit)."""
        with session.lock:
            session.events.sync()
            error = integrity.try_seal(session.dir)  # never raises; also rewrites results/index.json
        if error:
            session.events.append("seal_failed", error=error)

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
        if owned_by_live_process(rec_dir):
            raise SessionError(f"session {session_id} is owned by a running bridge process")
        if self._reattach(rec_dir, only_open=True) is None:
            raise SessionError(f"session {session_id} is not open")
        return session_id

    def _reattach(self, rec_dir: Path, *, only_open: bool) -> str | None:
        """Re-attach one recording after checking it like a new session (bridge/sessions/attach.py):
        a well-formed id equal to its folder, a known task, and a recorded workspace that is
        resolved and confined. Returns the id, or None when there is nothing to resume."""
        if rec_dir.is_symlink() or not (rec_dir / "session.json").is_file():
            return None
        record = load_record(rec_dir)
        if record.session_id != rec_dir.name:
            raise SessionError(f"{rec_dir}: session.json names another session ({record.session_id!r})")
        if owned_by_live_process(rec_dir) or record.session_id in self.sessions:
            return None
        interrupted_job = record.job is not None and record.job.state in ("queued", "running")
        if record.state not in ("active", "paused") and (only_open or not interrupted_job):
            return None
        task = self.catalog.get(record.task_id)
        workspace = check_recorded_workspace(task, record.workspace, self.recordings_dir)
        settle_orphaned_clock(rec_dir, record)
        if not workspace.is_dir() and not interrupted_job:
            return None
        session = Session(record, rec_dir, task)
        session.anchor = identity_at(workspace)  # what the workspace path leads to now, symlink-free
        session.claim()
        session.events.append("reattach", pid=os.getpid(), state=record.state)
        if record.state in ("active", "paused"):
            self._start_recorder(session, resume=True)  # reconciles what changed while down
            if record.state == "active":
                record.clock.start()  # settled above: the time the bridge was down is not work
                self._arm_timer(session)
        else:
            session.events.append("score_resume", job_id=record.job.job_id if record.job else None)
            self._launch_job(session)
        session.save()
        self.sessions[record.session_id] = session
        return record.session_id

    def close(self) -> None:
        """Stop recorders and timers; running jobs finish in the background threads' daemons."""
        if self._closed:
            return
        self._closed = True
        for session in list(self.sessions.values()):
            self._disarm_timer(session)
            if session.record.state in ("active", "paused") and session.recorder is not None:
                try:
                    session.recorder.checkpoint("server_stop")
                except Exception:  # noqa: BLE001 - closing must not fail on a vanished workspace
                    pass
                session.recorder.stop()
                session.events.append("detach", pid=os.getpid())
            if session.job_thread is None or not session.job_thread.is_alive():
                session.release()
                session.events.close()  # a running job still writes its score events

    def wait_jobs(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else utcnow().timestamp() + timeout
        for session in list(self.sessions.values()):
            if session.job_thread is not None:
                remaining = None if deadline is None else max(0.0, deadline - utcnow().timestamp())
                session.job_thread.join(remaining)
