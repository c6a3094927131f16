"""Opening a session: a new one (the checks on its workspace and its run, the new recording, the
seed written into the workspace, the recorder that starts watching it) or a recorded one again
after a restart (`reopen`).

`open_session` holds the workspace as a directory fd (bridge/fs/anchor.py) from its check to the
start of the recorder; a start that fails half-way is closed by `abort_start`, so it leaves
evidence rather than an open session.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable, Container, Iterable
from pathlib import Path
from typing import Literal

from bridge.errors import PathError, SessionError
from bridge.fs.anchor import identity, identity_at, is_empty, open_workspace, replace_file, still_at, write_new
from bridge.fs.ignore import EXCLUDED_DIRS
from bridge.recording.clock import iso, utcnow
from bridge.sessions import contamination
from bridge.sessions.attach import MARKER, META_DIR, check_confined, check_recorded_workspace, marker_bytes
from bridge.sessions.attempts import HeldSession, check_not_nested, next_attempt, recorded_sessions_of_run
from bridge.sessions.launch import start_job
from bridge.sessions.live import Session, find_recording_for_workspace, load_record
from bridge.sessions.models import IDE_FILES, ClientInfo, Scorer, SessionRecord
from bridge.sessions.ownership import OwnerLock, held_elsewhere
from bridge.sessions.recorder import Recorder
from bridge.sessions.recovery import settle_orphaned_clock
from bridge.sessions.settings import RecorderSettings, SessionSettings
from bridge.sessions.timelimit import arm_timer
from bridge.tasks.catalog import Catalog
from bridge.tasks.model import Task

log = logging.getLogger("bridge.sessions.manager")  # the manager's logger: opening is part of its work


def new_session_id(task_id: str) -> str:
    stamp = utcnow().strftime("%Y%m%dT%H%M%SZ")
    # ASCII only: the id must match bridge.sessions.attach.SESSION_ID_RE to be found again
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_" else "-" for c in task_id)[:40] or "task"
    return f"{stamp}-{safe}-{secrets.token_hex(3)}"


def resolve_new_workspace(task: Task, workspace: Path | str, within: Path | None, recordings_dir: Path) -> Path:
    """The workspace path resolved, inside `within` when given, and confined (bridge/sessions/attach.py)."""
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
    check_confined(task, resolved, recordings_dir)  # before creating anything
    return resolved


def check_run_rules(
    task: Task,
    workspace: Path,
    sessions: Iterable[Session],
    *,
    recordings_dir: Path,
    run_id: str,
    named_run: bool,
    attempts: int,
) -> int:
    """Refuse a workspace nested with another of this run's, or a task out of attempts
    (bridge/sessions/attempts.py); returns the new session's attempt number."""
    sessions = list(sessions)
    for other in sessions:
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
        for s in sessions
    }
    # A run id given on the command line spans processes: its sessions on disk count too.
    for item in recorded_sessions_of_run(recordings_dir, run_id, load_record) if named_run else []:
        held.setdefault(item.session_id, item)
    check_not_nested(workspace, list(held.values()))
    return next_attempt(task.id, list(held.values()), attempts)


def check_free(recordings_dir: Path, workspace: Path, ws_fd: int, *, allow_nonempty: bool) -> None:
    """Refuse a workspace with an open recorded session, or a non-empty one."""
    existing = find_recording_for_workspace(recordings_dir, workspace)
    if existing is not None:
        rec = load_record(existing)
        if rec.state in ("active", "paused"):
            raise SessionError(
                f"workspace {workspace} already has an open session {rec.session_id}; quit or submit it first"
            )
    if not allow_nonempty and not is_empty(ws_fd, IDE_FILES | {META_DIR} | EXCLUDED_DIRS):
        raise SessionError(
            f"workspace {workspace} is not empty; use an empty folder (from the command line, "
            "`rgbridge session start --allow-nonempty` accepts one that has files)"
        )


def new_session(
    task: Task,
    workspace: Path,
    recordings_dir: Path,
    *,
    mode: Literal["agent", "human"],
    client: ClientInfo | None,
    attempt: int,
    practice: bool,
    run_id: str,
) -> Session:
    """A new recording folder claimed by this process, its record and its `session_start` event."""
    session_id = new_session_id(task.id)
    rec_dir = recordings_dir / session_id
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
        practice=practice,
        client=client or ClientInfo(),
        created_at=iso(utcnow()),
        run_id=run_id,
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
        run_id=run_id,
        attempt=attempt,
    )
    return session


def abort_start(session: Session, exc: BaseException) -> None:
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
    except Exception:  # the original error is what the caller must see
        log.exception("could not record the aborted start of %s", session.record.session_id)


def seed(session: Session, ws_fd: int) -> None:
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


def start_recorder(
    session: Session, *, settings: RecorderSettings, on_sentinel: Callable[[str], None], resume: bool = False
) -> None:
    """Start watching the workspace: `resume` reconciles against the store's last commit."""
    sid = session.record.session_id
    head = session.store.head() if resume else None
    session.recorder = Recorder(
        session.workspace,
        event_log=session.events,
        store=session.store,
        settings=settings,
        on_sentinel=lambda: on_sentinel(sid),
        baseline=session.store.manifest_of(head) if head else None,
    )
    contamination.open_guard(session)  # golden files into memory, then watched until the recorder stops
    session.recorder.start()  # places watches, reconciles against disk, commits "start"


def changed_while_starting(workspace: Path, exc: OSError) -> PathError:
    return PathError(
        f"workspace {workspace} changed while the session was starting ({exc.strerror or exc}); nothing was started"
    )


def open_session(
    task: Task,
    workspace: Path,
    recordings_dir: Path,
    *,
    allow_nonempty: bool,
    mode: Literal["agent", "human"],
    client: ClientInfo | None,
    attempt: int,
    run_id: str,
    settings: SessionSettings,
    on_sentinel: Callable[[str], None],
) -> Session:
    """A new session in `workspace`, seeded and recorded; its clock is not started yet. `run_id`:
    the manager's run (`settings.run_id` or the fresh id it made)."""
    ws_fd = open_workspace(workspace)  # held: later checks and seed writes go through it
    try:
        try:
            check_free(recordings_dir, workspace, ws_fd, allow_nonempty=allow_nonempty)
            session = new_session(
                task,
                workspace,
                recordings_dir,
                mode=mode,
                client=client,
                attempt=attempt,
                practice=settings.practice,
                run_id=run_id,
            )
        except OSError as exc:  # a folder on its path vanished or was swapped meanwhile: a clear refusal
            raise changed_while_starting(workspace, exc) from None
        try:
            seed(session, ws_fd)
            start_recorder(session, settings=settings.recorder, on_sentinel=on_sentinel)
            assert session.recorder is not None
            session.anchor = identity(ws_fd)
            if session.recorder.root != workspace or not still_at(ws_fd, workspace):
                raise PathError(
                    f"workspace {workspace} changed while the session was starting "
                    "(a folder on its path was replaced); nothing was started"
                )
        except OSError as exc:  # e.g. the folder vanished under the recorder: a clear error
            abort_start(session, exc)
            raise changed_while_starting(workspace, exc) from None
        except BaseException as exc:
            abort_start(session, exc)
            raise
    finally:
        os.close(ws_fd)
    return session


def _interrupted_job(record: SessionRecord) -> bool:
    return record.job is not None and record.job.state in ("queued", "running")


def _resumable(record: SessionRecord, only_open: bool) -> bool:
    """An open session, or (unless `only_open`) one whose scoring job was interrupted."""
    return record.state in ("active", "paused") or (not only_open and _interrupted_job(record))


def reopen(
    rec_dir: Path,
    *,
    only_open: bool,
    catalog: Catalog,
    recordings_dir: Path,
    held: Container[str],
    settings: SessionSettings,
    on_sentinel: Callable[[str], None],
    on_limit: Callable[[str], None],
    in_process: Scorer | None,
) -> Session | None:
    """Re-attach one recording after checking it like a new session (bridge/sessions/attach.py):
    a well-formed id equal to its folder, a known task, and a recorded workspace that is
    resolved and confined. An open session records again (and its clock runs again if it was
    active); an interrupted job is resumed. None when there is nothing to resume, or the
    session is `held` already."""
    if rec_dir.is_symlink() or not (rec_dir / "session.json").is_file():
        return None
    record = load_record(rec_dir)
    if record.session_id != rec_dir.name:
        raise SessionError(f"{rec_dir}: session.json names another session ({record.session_id!r})")
    if held_elsewhere(rec_dir) or record.session_id in held or not _resumable(record, only_open):
        return None  # checked again once held: a cheap filter that leaves finished recordings alone
    task = catalog.get(record.task_id)
    workspace = check_recorded_workspace(task, record.workspace, recordings_dir)
    # held before anything is written: of two processes re-attaching at once, one goes on
    owner = OwnerLock.take(rec_dir)
    if owner is None:
        return None
    try:
        record = load_record(rec_dir)  # as it is now that it is ours: its holder may have ended it
        if not _resumable(record, only_open) or not (workspace.is_dir() or _interrupted_job(record)):
            owner.release()
            return None
        settle_orphaned_clock(rec_dir, record)
        session = Session(record, rec_dir, task, owner=owner)
        session.anchor = identity_at(workspace)  # what the workspace path leads to now, symlink-free
        session.events.append("reattach", pid=os.getpid(), state=record.state)
        if record.state in ("active", "paused"):
            # reconciles what changed while down
            start_recorder(session, settings=settings.recorder, on_sentinel=on_sentinel, resume=True)
            if record.state == "active":
                record.clock.start()  # settled above: the time the bridge was down is not work
                session.events.append("clock_start", working_seconds=record.clock.elapsed())
                arm_timer(session, on_limit)
        else:
            session.events.append("score_resume", job_id=record.job.job_id if record.job else None)
            session.save()
            start_job(session, in_process, finish_at_exit=settings.finish_jobs_at_exit)  # may hand the recording off
            return session
    except BaseException:
        owner.release()
        raise
    session.save()
    return session
