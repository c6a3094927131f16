"""Sessions: a task opened in a workspace, its working clock, recorder, submission and scoring.

Lifecycle (modelled on inspect_ai's human_cli): start → (pause/resume)* → submit | quit.
Everything a session knows is persisted in `recordings/<session-id>/session.json` and the
append-only `events.jsonl`, so a restarted server re-attaches to active sessions, reconciles
their workspaces, and resumes scoring jobs that were interrupted.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from bridge import __version__, integrity
from bridge.catalog import Catalog
from bridge.clock import Clock, iso, utcnow
from bridge.locations import default_recordings_dir
from bridge.errors import BridgeError, PathError, SessionError
from bridge.events import EventLog
from bridge.files import pid_alive, write_json_atomic
from bridge.hashing import EXCLUDED_DIRS
from bridge.recorder import Recorder
from bridge.scoring.result import summarize_result
from bridge.shadowgit import ShadowStore
from bridge.task import Task

FORMAT_VERSION = 1
META_DIR = ".rgbridge"  # bridge metadata inside the workspace (never recorded)
SENTINEL = "SUBMIT"
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
    message: str = ""
    result: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None


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
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in task_id)[:40]
    return f"{stamp}-{safe}-{secrets.token_hex(3)}"


def workspace_is_empty(workspace: Path) -> bool:
    for entry in workspace.iterdir():
        if entry.name in IDE_FILES or entry.name == META_DIR or entry.name in EXCLUDED_DIRS:
            continue
        return False
    return True


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
    """The recording of the open (active/paused) session in `workspace`, via its marker file."""
    marker = workspace / META_DIR / "session.json"
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
        candidate = Path(data["recording"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if candidate.is_dir() and (candidate / "session.json").is_file():
        return candidate
    by_id = recordings_dir / str(data.get("session_id", ""))
    return by_id if (by_id / "session.json").is_file() else None


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
    ) -> None:
        self.catalog = catalog
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
            from bridge.scoring.engine import default_scorer  # lazy: docker only when scoring

            self._scorer = default_scorer()
        return self._scorer

    # ------------------------------------------------------------------ start
    def _check_workspace(self, task: Task, workspace: Path) -> None:
        protected = [task.root, task.tests_dir, self.recordings_dir]
        if task.solution_dir:
            protected.append(task.solution_dir)
        for path in protected:
            if workspace == path or workspace.is_relative_to(path) or path.is_relative_to(workspace):
                raise PathError(
                    f"workspace {workspace} overlaps {path}: the workspace must be outside the task and "
                    "recordings folders (golden tests must never be reachable from it)"
                )

    def start(
        self,
        task_id: str,
        workspace: Path,
        *,
        mode: Literal["agent", "human"] = "agent",
        client: ClientInfo | None = None,
        allow_nonempty: bool = False,
    ) -> SessionStatus:
        task = self.catalog.get(task_id)
        raw = str(workspace)
        if "${" in raw:
            raise PathError(f"workspace {raw!r} contains an unexpanded IDE variable")
        workspace = Path(os.path.realpath(os.path.expanduser(raw)))
        if workspace.exists() and not workspace.is_dir():
            raise PathError(f"workspace {workspace} is not a directory")
        self._check_workspace(task, workspace)  # before creating anything
        workspace.mkdir(parents=True, exist_ok=True)
        with self._lock:
            for other in self.sessions.values():
                if other.workspace == workspace and other.record.state in ("active", "paused"):
                    raise SessionError(
                        f"workspace {workspace} already has an open session {other.record.session_id}"
                    )
            existing = find_recording_for_workspace(self.recordings_dir, workspace)
            if existing is not None:
                rec = load_record(existing)
                if rec.state in ("active", "paused"):
                    raise SessionError(
                        f"workspace {workspace} already has an open session {rec.session_id}; "
                        "quit or submit it first"
                    )
            if not allow_nonempty and not workspace_is_empty(workspace):
                raise SessionError(
                    f"workspace {workspace} is not empty; use an empty folder (or allow a non-empty one explicitly)"
                )
            session_id = _new_session_id(task.id)
            rec_dir = self.recordings_dir / session_id
            rec_dir.mkdir(parents=True)
            record = SessionRecord(
                session_id=session_id, task_id=task.id, task_hash=task.content_hash,
                task_version=task.manifest.version, task_source=task.source, task_port=task.port,
                time_limit=task.manifest.timeouts.session, workspace=str(workspace), mode=mode,
                practice=self.practice, client=client or ClientInfo(), created_at=iso(utcnow()),
            )
            session = Session(record, rec_dir, task)
            session.claim()
            self._seed(session)
            session.events.append(
                "session_start", session_id=session_id, task_id=task.id, task_hash=task.content_hash,
                mode=mode, client=record.client.model_dump(), workspace=str(workspace),
            )
            self._start_recorder(session)
            record.clock.start()
            session.events.append("clock_start", working_seconds=0.0)
            session.save()
            self._arm_timer(session)
            self.sessions[session_id] = session
            return self._status(session)

    def _seed(self, session: Session) -> None:
        task, ws = session.task, session.workspace
        seeded: list[str] = []
        if not (ws / "README.md").exists():
            shutil.copyfile(task.readme_path, ws / "README.md")
            seeded.append("README.md")
        for name, source in sorted(task.seed_files.items()):
            target = ws / name
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            seeded.append(name)
        meta = ws / META_DIR
        meta.mkdir(exist_ok=True)
        marker = {"session_id": session.record.session_id, "task_id": task.id, "recording": str(session.dir)}
        write_json_atomic(meta / "session.json", marker)
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
            job_id=rec.job.job_id if rec.job else None, message=message,
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
    def _arm_timer(self, session: Session) -> None:
        self._disarm_timer(session)
        limit = session.record.time_limit
        if limit <= 0:
            return
        remaining = max(0.0, limit - session.record.clock.elapsed())
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
            session.events.append("clock_stop", working_seconds=rec.clock.elapsed())
            assert session.recorder is not None
            seal = session.recorder.seal(quiet_seconds=self.seal_quiet_seconds, max_wait=self.seal_max_wait,
                                         tag=SUBMISSION_REF)
            session.recorder.stop()
            rec.submission = Submission(
                signal=signal, at=iso(utcnow()), commit=seal.commit, tree_hash=seal.tree_hash,
                stable=seal.stable, seal_seconds=round(seal.seconds, 3), files=len(seal.manifest),
            )
            rec.state = "submitted"
            rec.ended_at = rec.submission.at
            job = Job(job_id=secrets.token_hex(6), profile=self.profile)
            rec.job = job
            session.events.append(
                "submit", signal=signal, commit=seal.commit, tree_hash=seal.tree_hash, stable=seal.stable,
                files=len(seal.manifest), working_seconds=rec.clock.elapsed(), job_id=job.job_id,
            )
            session.save()
            self._launch_job(session)
            note = "" if seal.stable else " (workspace kept changing while sealing: snapshot marked unstable)"
            return SubmitReceipt(
                session_id=session_id, job_id=job.job_id, commit=seal.commit, tree_hash=seal.tree_hash,
                stable=seal.stable,
                message=f"Submitted; scoring started as job {job.job_id}{note}. "
                        "Call get_result until its state is done.",
            )

    def _launch_job(self, session: Session) -> None:
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
        session = self._get(session_id)
        if wait_seconds > 0 and session.record.job and session.record.job.state in ("queued", "running"):
            session.job_done.wait(timeout=min(float(wait_seconds), 600.0))
        with session.lock:
            job = session.record.job
            if job is None:
                return ResultStatus(session_id=session_id, state="not_submitted",
                                    message="not submitted yet: call submit_task when the work is done")
            status = ResultStatus(session_id=session_id, state=job.state, job_id=job.job_id,
                                  message=job.error or job.message)
            if job.state == "done" and job.result_dir:
                data = json.loads((session.dir / job.result_dir / "result.json").read_text(encoding="utf-8"))
                status.result = data
                status.summary = summarize_result(data)
            return status

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
        for rec_dir in sorted(p for p in self.recordings_dir.iterdir() if (p / "session.json").is_file()):
            try:
                record = load_record(rec_dir)
            except SessionError:
                continue
            interrupted_job = record.job is not None and record.job.state in ("queued", "running")
            if record.state not in ("active", "paused") and not interrupted_job:
                continue
            if owned_by_live_process(rec_dir) or record.session_id in self.sessions:
                continue
            try:
                task = self.catalog.get(record.task_id)
            except BridgeError:
                continue
            if not Path(record.workspace).is_dir() and not interrupted_job:
                continue
            session = Session(record, rec_dir, task)
            session.claim()
            session.events.append("reattach", pid=os.getpid(), state=record.state)
            if record.state in ("active", "paused"):
                self._start_recorder(session, resume=True)  # reconciles what changed while down
                if record.state == "active":
                    self._arm_timer(session)
            else:
                session.events.append("score_resume", job_id=record.job.job_id if record.job else None)
                self._launch_job(session)
            session.save()
            self.sessions[record.session_id] = session
            attached.append(record.session_id)
        return attached

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

