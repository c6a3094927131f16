"""Sessions: a task opened in a workspace, its working clock, recorder, submission and scoring.

Lifecycle (modelled on inspect_ai's human_cli): start → (pause/resume)* → submit | quit.
Everything a session knows is persisted in `recordings/<session-id>/session.json` and the
append-only `events.jsonl`, so a restarted server re-attaches to active sessions, reconciles
their workspaces, and resumes scoring jobs that were interrupted.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from bridge import __version__
from bridge.recording import integrity
from bridge.sessions import contamination
from bridge.sessions.attach import (
    MARKER,
    META_DIR,
    check_confined,
    check_recorded_workspace,
    is_session_id,
    marker_bytes,
    read_marker,
    recording_dir_for,
)
from bridge.sessions.attempts import (
    HeldSession,
    check_not_nested,
    check_run_id,
    next_attempt,
    recorded_sessions_of_run,
)
from bridge.tasks.catalog import Catalog
from bridge.recording.clock import Clock, iso, utcnow
from bridge.errors import BridgeError, PathError, RecordingError, SessionError
from bridge.recording.events import EventLog
from bridge.fs.files import pid_alive, write_json_atomic
from bridge.fs.anchor import (
    identity,
    identity_at,
    is_empty,
    open_workspace,
    replace_file,
    still_at,
    write_new,
)
from bridge.fs.hashing import EXCLUDED_DIRS
from bridge.locations import default_recordings_dir  # noqa: F401 - re-exported (older imports)
from bridge.fs.paths import safe_relative
from bridge.sessions.recorder import Recorder
from bridge.sessions.recovery import settle_orphaned_clock
from bridge.scoring.result import summarize_result
from bridge.recording.store import ShadowStore
from bridge.tasks.model import Task

log = logging.getLogger("bridge.sessions.manager")

FORMAT_VERSION = 1
SENTINEL = "SUBMIT"
SUBMIT_RETRY_SECONDS = 5.0  # a time-limit submit the disk refused is retried this often
SUBMISSION_REF = "refs/rgbridge/submission"
#: files an IDE may put in a fresh workspace that do not make it "non-empty"
IDE_FILES = frozenset({".mcp.json", ".DS_Store"})

SessionState = Literal["active", "paused", "submitted", "scored", "quit"]
JobState = Literal["not_submitted", "queued", "running", "done", "failed"]
Profile = Literal["strict", "compat", "both"]
Signal = Literal["mcp", "sentinel", "cli", "time_limit"]


class Scorer(Protocol):
    """Scores a materialised snapshot; writes result.json and logs into `output_dir`."""

    def __call__(
        self,
        task: Task,
        repo_dir: Path,
        *,
        profile: str,
        output_dir: Path,
        snapshot_hash: str,
        progress: Callable[[str], None],
    ) -> BaseModel: ...


class ClientInfo(BaseModel):
    name: str = "unknown"
    version: str = ""
    protocol: str = ""  # MCP protocol version the client negotiated, when known


class TaskSummary(BaseModel):
    id: str
    title: str
    lang: str
    framework: str
    port: int
    difficulty: str


class TaskSpec(TaskSummary):
    readme: str
    rules: str
    seed_files: list[str] = Field(default_factory=list)


class Submission(BaseModel):
    signal: Signal
    at: str
    commit: str
    tree_hash: str
    stable: bool
    seal_seconds: float
    files: int


class Job(BaseModel):
    job_id: str
    state: JobState = "queued"
    message: str = ""
    profile: str = "both"
    started_at: str | None = None
    finished_at: str | None = None
    result_dir: str | None = None
    error: str | None = None


class SessionRecord(BaseModel):
    """The content of session.json (format documented in docs/recording-format.md)."""

    format_version: int = FORMAT_VERSION
    bridge_version: str = __version__
    session_id: str
    task_id: str
    task_hash: str
    task_version: str
    task_source: str
    task_port: int
    time_limit: int = 0
    workspace: str
    run_id: str = ""  # the bridge process (agent run) that started it (bridge/sessions/attempts.py)
    attempt: int = 1  # this session's attempt at the task within its run
    mode: Literal["agent", "human"] = "agent"
    practice: bool = False
    client: ClientInfo = Field(default_factory=ClientInfo)
    created_at: str
    ended_at: str | None = None
    state: SessionState = "active"
    clock: Clock = Field(default_factory=Clock)
    notes: int = 0
    submission: Submission | None = None
    job: Job | None = None
    quit_reason: str | None = None
    failure: str | None = None  # the last failed operation (e.g. a submit the disk refused); None when fine


class SessionStatus(BaseModel):
    session_id: str
    task_id: str
    state: SessionState
    mode: str
    workspace: str
    recording: str
    clock_running: bool
    working_seconds: float
    time_limit: int
    files_changed: int
    recorder_mode: str
    recorder_degraded: str | None
    submission: Submission | None
    scoring: JobState
    job_id: str | None
    attempt: int = 1
    failure: str | None = None
    message: str = ""


class SubmitReceipt(BaseModel):
    session_id: str
    job_id: str
    commit: str
    tree_hash: str
    stable: bool
    message: str


class ResultStatus(BaseModel):
    session_id: str
    state: JobState
    job_id: str | None = None
    attempt: int = 1
    message: str = ""
    result: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    #: a golden test or solution file was opened while the session was open (bridge/sessions/contamination.py)
    contaminated: bool = False
    contamination: list[dict[str, Any]] = Field(default_factory=list)


def rules_text(task: Task) -> str:
    """The rules of the exercise, shown by get_task and the solve_task prompt."""
    return (
        f"Build the service described in the README of task '{task.id}' ({task.lang}, {task.framework}).\n"
        "Rules:\n"
        "1. Work only inside the session workspace; the README there is the whole specification.\n"
        f"2. The service must listen on 0.0.0.0 port {task.port}.\n"
        "3. Provide requirements.txt (Python dependencies, may be empty) and start.sh at the repository root;\n"
        "   start.sh starts the service in the foreground (it is run as `bash start.sh` from the repo root).\n"
        "4. Do not look for, fetch or write the benchmark's golden tests; they are not available to you.\n"
        "5. Scoring builds your repository in a container without network access at run time: install\n"
        "   everything through requirements.txt.\n"
        "6. When you are done, call submit_task once, then poll get_result until the state is done.\n"
    )


def _new_session_id(task_id: str) -> str:
    stamp = utcnow().strftime("%Y%m%dT%H%M%SZ")
    # ASCII only: the id must match bridge.sessions.attach.SESSION_ID_RE to be found again
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "-" for c in task_id)[:40] or "task"
    return f"{stamp}-{safe}-{secrets.token_hex(3)}"


def result_status(record: SessionRecord, rec_dir: Path) -> ResultStatus:
    """What get_result reports for a session: job state and, when done, the per-profile summary."""
    job = record.job
    if job is None:
        return contamination.annotate(ResultStatus(
            session_id=record.session_id, state="not_submitted", attempt=record.attempt,
            message="not submitted yet: call submit_task when the work is done"), rec_dir)
    status = ResultStatus(session_id=record.session_id, state=job.state, job_id=job.job_id,
                          attempt=record.attempt, message=job.error or job.message)
    if job.state == "done" and job.result_dir:
        path = rec_dir / safe_relative(job.result_dir) / "result.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        status.result = data
        status.summary = summarize_result(data)
    return contamination.annotate(status, rec_dir)


class Session:
    """One live session owned by this process: record, recorder, event log, job thread."""

    def __init__(self, record: SessionRecord, recording_dir: Path, task: Task) -> None:
        self.record = record
        self.dir = recording_dir
        self.task = task
        self.lock = threading.RLock()
        self.events = EventLog(recording_dir / "events.jsonl")
        self.store = ShadowStore(recording_dir / "store", Path(record.workspace))
        self.recorder: Recorder | None = None
        self.job_thread: threading.Thread | None = None
        self.job_done = threading.Event()
        self.timer: threading.Timer | None = None
        #: (st_dev, st_ino) of the workspace folder the session started on (bridge/fs/anchor.py)
        self.anchor: tuple[int, int] | None = None

    def check_anchor(self) -> None:
        """Refuse to use a workspace path that, walked without following symlinks, no longer leads
        to the folder the session started on (a folder on it was swapped for a symlink, e.g. into
        a task's solution: the snapshot must come from the agent's own folder)."""
        if self.anchor is not None and identity_at(self.workspace) != self.anchor:
            raise PathError(f"the workspace path {self.workspace} no longer leads to this session's folder "
                            "(a folder on it was moved or replaced by a symlink)")

    @property
    def workspace(self) -> Path:
        return Path(self.record.workspace)

    def save(self) -> None:
        write_json_atomic(self.dir / "session.json", self.record.model_dump(mode="json"))

    def claim(self) -> None:
        (self.dir / "owner.pid").write_text(str(os.getpid()), encoding="ascii")

    def release(self) -> None:
        owner = self.dir / "owner.pid"
        try:
            if owner.read_text(encoding="ascii").strip() == str(os.getpid()):
                owner.unlink()
        except (OSError, ValueError):
            pass


def owned_by_live_process(recording_dir: Path) -> bool:
    try:
        pid = int((recording_dir / "owner.pid").read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return False
    return pid != os.getpid() and pid_alive(pid)


def load_record(recording_dir: Path) -> SessionRecord:
    path = recording_dir / "session.json"
    try:
        return SessionRecord.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SessionError(f"{recording_dir}: not a recording (no session.json)") from None
    except ValueError as exc:
        raise SessionError(f"{path}: invalid session.json: {str(exc).splitlines()[0]}") from None


def find_recording_for_workspace(recordings_dir: Path, workspace: Path) -> Path | None:
    """The recording of the session in `workspace`: the marker names only an id, the recording
    is looked up by id under `recordings_dir` and must name this very workspace (bridge/sessions/attach.py)."""
    sid = read_marker(workspace)
    if sid is None:
        return None
    try:
        rec_dir = recording_dir_for(recordings_dir, sid)
        record = load_record(rec_dir)
    except SessionError:
        return None
    if record.session_id != sid or record.workspace != str(workspace):
        return None
    return rec_dir


# Tool-call logging keeps what a reviewer needs and no more: every key, value and error is
# capped, and so is the number of keys, so a client cannot grow events.jsonl without bound.
MAX_LOGGED_CHARS = 2000
MAX_LOGGED_KEY_CHARS = 200
MAX_LOGGED_KEYS = 50


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def capped_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """Tool arguments as logged: keys and values capped, at most MAX_LOGGED_KEYS of them."""
    out: dict[str, Any] = {}
    for i, (key, value) in enumerate(arguments.items()):
        if i == MAX_LOGGED_KEYS:
            out["…"] = f"{len(arguments) - MAX_LOGGED_KEYS} more argument(s) not logged"
            break
        text = value if isinstance(value, (bool, int, float, type(None))) else str(value)
        out[_clip(str(key), MAX_LOGGED_KEY_CHARS)] = (
            text if not isinstance(text, str) else _clip(text, MAX_LOGGED_CHARS))
    return out


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
        self.run_id = check_run_id(run_id) if run_id else f"{utcnow().strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(4)}"
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
            TaskSummary(id=t.id, title=t.manifest.title, lang=t.lang, framework=t.framework,
                        port=t.port, difficulty=t.manifest.difficulty)
            for t in self.catalog
        ]

    def get_task(self, task_id: str) -> TaskSpec:
        task = self.catalog.get(task_id)
        return TaskSpec(
            id=task.id, title=task.manifest.title, lang=task.lang, framework=task.framework,
            port=task.port, difficulty=task.manifest.difficulty, readme=task.readme,
            rules=rules_text(task), seed_files=sorted(task.seed_files),
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
                        raise PathError(f"workspace {workspace} changed while the session was starting "
                                        "(a folder on its path was replaced); nothing was started")
                except OSError as exc:  # e.g. the folder vanished under the recorder: a clear error
                    self._abort_start(session, exc)
                    raise PathError(f"workspace {workspace} changed while the session was starting "
                                    f"({exc.strerror or exc}); nothing was started") from None
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
        resolved = Path(os.path.realpath(os.path.expanduser(raw)))
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
        held = {s.record.session_id: HeldSession(session_id=s.record.session_id, task_id=s.record.task_id,
                                                 workspace=s.workspace, state=s.record.state,
                                                 submitted=s.record.submission is not None)
                for s in self.sessions.values()}
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
                raise SessionError(f"workspace {workspace} already has an open session {rec.session_id}; "
                                   "quit or submit it first")
        if not allow_nonempty and not is_empty(ws_fd, IDE_FILES | {META_DIR} | EXCLUDED_DIRS):
            raise SessionError(
                f"workspace {workspace} is not empty; use an empty folder (or allow a non-empty one explicitly)")

    def _new_session(self, task: Task, workspace: Path, *, mode: Literal["agent", "human"],
                     client: ClientInfo | None, attempt: int) -> Session:
        session_id = _new_session_id(task.id)
        rec_dir = self.recordings_dir / session_id
        rec_dir.mkdir(parents=True)
        record = SessionRecord(
            session_id=session_id, task_id=task.id, task_hash=task.content_hash,
            task_version=task.manifest.version, task_source=task.source, task_port=task.port,
            time_limit=task.manifest.timeouts.session, workspace=str(workspace), mode=mode,
            practice=self.practice, client=client or ClientInfo(), created_at=iso(utcnow()),
            run_id=self.run_id, attempt=attempt,
        )
        session = Session(record, rec_dir, task)
        session.claim()
        session.events.append(
            "session_start", session_id=session_id, task_id=task.id, task_hash=task.content_hash,
            mode=mode, client=record.client.model_dump(), workspace=str(workspace),
            run_id=self.run_id, attempt=attempt,
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
            session_id=rec.session_id, task_id=rec.task_id, state=rec.state, mode=rec.mode,
            workspace=rec.workspace, recording=str(session.dir), clock_running=rec.clock.running,
            working_seconds=round(rec.clock.elapsed(), 3), time_limit=rec.time_limit,
            files_changed=recorder.files_changed if recorder else 0,
            recorder_mode=recorder.mode if recorder else "stopped",
            recorder_degraded=recorder.degraded if recorder else None,
            submission=rec.submission, scoring=rec.job.state if rec.job else "not_submitted",
            job_id=rec.job.job_id if rec.job else None, attempt=rec.attempt, failure=rec.failure,
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

    def log_call(self, session_id: str | None, tool: str, arguments: dict[str, Any], *,
                 ok: bool, error: str | None = None) -> None:
        """Log an MCP call into its session's recording (or the server log when there is none)."""
        safe_args = capped_arguments(arguments)
        error = _clip(error, MAX_LOGGED_CHARS) if error is not None else None
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
        summary = {"commit": ckpt.commit, "deployed": result.dsr.success, "message": result.dsr.message,
                   "outcome": result.outcome, "time_to_ready": result.dsr.time_to_ready}
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
                seal = session.recorder.seal(quiet_seconds=self.seal_quiet_seconds, max_wait=self.seal_max_wait,
                                             tag=SUBMISSION_REF)
                session.check_anchor()  # the snapshot was read from the session's own folder
                submission = Submission(
                    signal=signal, at=iso(utcnow()), commit=seal.commit, tree_hash=seal.tree_hash,
                    stable=seal.stable, seal_seconds=round(seal.seconds, 3), files=len(seal.manifest),
                )
                job = Job(job_id=secrets.token_hex(6), profile=self.profile)
                saved = rec.model_copy(deep=True)
                rec.submission, rec.state, rec.ended_at, rec.job, rec.failure = (
                    submission, "submitted", submission.at, job, None)
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
                "submit", signal=signal, commit=seal.commit, tree_hash=seal.tree_hash, stable=seal.stable,
                files=len(seal.manifest), working_seconds=rec.clock.elapsed(), job_id=job.job_id,
            )
            self._launch_job(session)
            note = "" if seal.stable else " (workspace kept changing while sealing: snapshot marked unstable)"
            return SubmitReceipt(
                session_id=session_id, job_id=job.job_id, commit=seal.commit, tree_hash=seal.tree_hash,
                stable=seal.stable,
                message=f"Submitted; scoring started as job {job.job_id}{note}. "
                        "Call get_result until its state is done.",
            )

    def _submit_failed(self, session: Session, exc: OSError | RecordingError | PathError) -> SessionError:
        rec = session.record
        detail = (exc.strerror if isinstance(exc, OSError) else None) or str(exc).splitlines()[0][:300]
        reason = (f"submit refused: {detail}" if isinstance(exc, PathError)
                  else f"submit failed: could not write the recording ({detail})")
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
        fix = ("restore the workspace folder" if isinstance(exc, PathError)
               else "free space or fix the recordings folder")
        return SessionError(f"{reason}; the session is still open: {fix}, then call submit_task again")

    def _launch_job(self, session: Session) -> None:
        session.task = contamination.staged(session.task)  # a resumed job too scores from the staged copy
        session.job_done.clear()
        thread = threading.Thread(target=self._run_job, args=(session,), name=f"score-{session.record.session_id}",
                                  daemon=True)
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
        self._set_job(session, state="running", started_at=iso(utcnow()), message="preparing snapshot",
                      result_dir=str(out_dir.relative_to(session.dir)))
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
                    session.task, repo, profile=rec.job.profile, output_dir=out_dir,
                    snapshot_hash=rec.submission.tree_hash, progress=progress,
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

