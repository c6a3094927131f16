"""Finding and trusting a session's recording from its workspace.

The workspace belongs to the agent, so everything in it is untrusted, including the marker
`.rgbridge/session.json` the bridge writes there. The marker therefore carries only the
session id; the recording is looked up by that id directly under the recordings folder, and it
is trusted only when the recording names the same id and exactly this workspace. A recorded
workspace must also pass the same confinement check as a new one (not overlapping the task or
recordings folders), decided on its fully resolved path — a recording whose workspace is a
task folder is never re-attached, so its golden tests can never be copied into a store.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from bridge.errors import PathError, SessionError
from bridge.fs.walk import open_parent
from bridge.tasks.model import Task

META_DIR = ".rgbridge"  # bridge metadata inside the workspace (never recorded)
MARKER = "session.json"
MAX_MARKER_BYTES = 4096
#: what `_new_session_id` produces: UTC stamp, sanitised task id, 6 hex digits
SESSION_ID_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z-[A-Za-z0-9_-]{1,40}-[0-9a-f]{6}")


def check_session_id(text: object) -> str:
    """`text` if it is a well-formed session id, else SessionError (never a path, never `..`)."""
    if not isinstance(text, str) or not SESSION_ID_RE.fullmatch(text):
        raise SessionError(f"invalid session id {str(text)[:80]!r}")
    return text


def is_session_id(text: object) -> bool:
    return isinstance(text, str) and SESSION_ID_RE.fullmatch(text) is not None


def marker_bytes(session_id: str) -> bytes:
    return (json.dumps({"session_id": check_session_id(session_id)}) + "\n").encode("ascii")


def read_marker(workspace: Path) -> str | None:
    """The session id in the workspace's marker, or None (missing, symlinked, malformed)."""
    try:
        with open_parent(workspace, f"{META_DIR}/{MARKER}") as (dir_fd, name):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                raw = os.read(fd, MAX_MARKER_BYTES + 1)
            finally:
                os.close(fd)
    except (OSError, ValueError):
        return None
    if len(raw) > MAX_MARKER_BYTES:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None
    sid = data.get("session_id") if isinstance(data, dict) else None
    return sid if is_session_id(sid) else None


def recording_dir_for(recordings_dir: Path, session_id: str) -> Path:
    """recordings/<id>, refusing ids that are not ids and recordings that are symlinks."""
    rec_dir = Path(recordings_dir) / check_session_id(session_id)
    if rec_dir.is_symlink():
        raise SessionError(f"recording {rec_dir} is a symlink; refusing it")
    return rec_dir


def check_confined(task: Task, workspace: Path, recordings_dir: Path) -> None:
    """Refuse a workspace that is, contains or lies inside the task or recordings folders."""
    protected = [task.root, task.tests_dir, Path(recordings_dir)]
    if task.solution_dir:
        protected.append(task.solution_dir)
    for path in protected:
        real = Path(os.path.realpath(path))
        for candidate in {Path(path), real}:
            if workspace == candidate or workspace.is_relative_to(candidate) or candidate.is_relative_to(workspace):
                raise PathError(
                    f"workspace {workspace} overlaps {path}: the workspace must be outside the task and "
                    "recordings folders (golden tests must never be reachable from it)"
                )


def check_recorded_workspace(task: Task, recorded: str, recordings_dir: Path) -> Path:
    """The recorded workspace, if it is absolute, already fully resolved and confined."""
    workspace = Path(recorded)
    if not workspace.is_absolute() or os.path.realpath(workspace) != str(workspace):
        raise PathError(f"recorded workspace {recorded!r} is not a resolved absolute path (it moved or was edited)")
    check_confined(task, workspace, recordings_dir)
    return workspace
