"""A live session held by this process (record, recorder, event log, job thread) and the helpers
that find and load recordings on disk."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from bridge.errors import PathError, SessionError
from bridge.fs.anchor import (
    identity_at,
)
from bridge.fs.files import write_json_atomic
from bridge.recording.events import EventLog
from bridge.recording.store import ShadowStore
from bridge.sessions.attach import (
    read_marker,
    recording_dir_for,
)
from bridge.sessions.models import SessionRecord, SessionStatus
from bridge.sessions.ownership import OwnerLock
from bridge.sessions.recorder import Recorder
from bridge.tasks.model import Task


class Session:
    """One live session owned by this process: record, recorder, event log, job thread."""

    def __init__(
        self, record: SessionRecord, recording_dir: Path, task: Task, *, owner: OwnerLock | None = None
    ) -> None:
        #: this process's hold on the recording (bridge/sessions/ownership.py); `claim` takes it
        self.owner = owner
        self.record = record
        self.dir = recording_dir
        self.task = task
        self.lock = threading.RLock()
        self.events = EventLog(recording_dir / "events.jsonl", work=record.clock.elapsed)
        self.store = ShadowStore(recording_dir / "store", Path(record.workspace))
        self.recorder: Recorder | None = None
        self.job_thread: threading.Thread | None = None
        self.job_done = threading.Event()
        #: the job went to a detached scoring process (bridge/sessions/score_process.py): this process
        #: no longer writes into the recording and reads the job's state from disk
        self.handed_off = False
        #: handed off, but this process logs the submitting MCP call first (bridge/sessions/score_process.py)
        self.log_pending = False
        self.score_process: subprocess.Popen[bytes] | None = None
        self.timer: threading.Timer | None = None
        #: (st_dev, st_ino) of the workspace folder the session started on (bridge/fs/anchor.py)
        self.anchor: tuple[int, int] | None = None

    def check_anchor(self) -> None:
        """Refuse to use a workspace path that, walked without following symlinks, no longer leads
        to the folder the session started on (a folder on it was swapped for a symlink, e.g. into
        a task's solution: the snapshot must come from the agent's own folder)."""
        if self.anchor is not None and identity_at(self.workspace) != self.anchor:
            raise PathError(
                f"the workspace path {self.workspace} no longer leads to this session's folder "
                "(a folder on it was moved or replaced by a symlink)"
            )

    @property
    def workspace(self) -> Path:
        return Path(self.record.workspace)

    def status(self, message: str = "") -> SessionStatus:
        """What `task_status` answers: state, clock, recorder, submission and scoring."""
        rec = self.record
        recorder = self.recorder
        return SessionStatus(
            session_id=rec.session_id,
            task_id=rec.task_id,
            state=rec.state,
            mode=rec.mode,
            workspace=rec.workspace,
            recording=str(self.dir),
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

    def save(self) -> None:
        write_json_atomic(self.dir / "session.json", self.record.model_dump(mode="json"))

    def claim(self) -> None:
        """Hold the recording for this process, or raise when another process holds it."""
        if self.owner is None or not self.owner.held:
            self.owner = OwnerLock.take(self.dir)
            if self.owner is None:
                raise SessionError(f"session {self.record.session_id} is held by another bridge process")

    def release(self) -> None:
        if self.owner is not None:
            self.owner.release()


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


def recorded_session(recordings_dir: Path, session_id: str) -> tuple[SessionRecord, Path]:
    """A session of the recordings folder read from disk (read-only), and its recording folder;
    SessionError("unknown session ...") when there is none by that id."""
    try:
        rec_dir = recording_dir_for(recordings_dir, session_id)
        record = load_record(rec_dir)
    except SessionError:
        raise SessionError(f"unknown session {session_id!r}") from None
    if record.session_id != session_id:
        raise SessionError(f"unknown session {session_id!r}")
    return record, rec_dir
