"""The detached scoring process: a submitted session's job scored where the client's signals cannot
reach it, with the golden files in a folder no other process can see.

An IDE ends its stdio MCP server with SIGINT, SIGTERM or SIGHUP whenever it likes (README, "Agent
CLIs"), so a score the server promised must not live in the server. `hand_off` (called by
bridge/sessions/launch.py) gives a job to `python -m bridge.sessions.score_process RECORDING JOB_ID`, started in a session of its own
(`start_new_session`: a signal to the client's process group or to the server never reaches it)
with its stdio off the MCP pipe; the task and its golden archive (held in memory since the
session opened: bridge/sessions/contamination.py) go down its stdin. The scoring process then:

1. reads stdin whole and makes itself non-dumpable (bridge/sessions/linux.py: other processes
   of the user cannot open its `/proc/<pid>/mem`, `fd/` or `root/`);
2. enters a private mount namespace with a tmpfs over a fresh folder (bridge/sessions/linux.py)
   and makes that its TMPDIR:
   the golden files, the checked-out snapshot and every staging folder of scoring live there,
   visible to no other process, gone when it ends however it ends (without namespaces, e.g. a
   non-root user where user namespaces are off, it falls back to a 0700 folder removed at its
   end and swept at the next start, and records the gap as a `golden_watch_warning`);
3. claims the recording (`owner.lock`, bridge/sessions/ownership.py): two processes never score
   the same job; a job held elsewhere, or no longer queued/running under this id, is left alone;
4. scores the job as every job is scored (bridge/sessions/jobs.py `score_in_slot`): it waits for
   one of the machine-wide `RGBRIDGE_MAX_JOBS` slots, then `run_job` records the score and seals.

A scoring process killed with SIGKILL (or never started) leaves the job queued/running and
unheld: the next bridge start resumes it (bridge/sessions/opening.py `reopen`), and a server
that is still up re-launches it when `get_result` finds its scoring process gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import bridge
from bridge.errors import BridgeError
from bridge.recording.events import EventLog
from bridge.scoring.result import ScoreResult
from bridge.scoring.types import ProgressFn, ScoreRequest
from bridge.sessions import contamination, jobs
from bridge.sessions.linux import Unsupported, mount_private_tmpfs, not_dumpable, unmount
from bridge.sessions.live import Session, load_record
from bridge.sessions.models import Scorer
from bridge.sessions.ownership import OwnerLock, held_elsewhere
from bridge.tasks.model import Task

#: the mount point of a scoring process's private tmpfs (an empty folder seen from outside)
SCRATCH_PREFIX = "rgbridge-scoring-"
_HEADER = struct.Struct(">I")


def frame(task: Task, archive: bytes) -> bytes:
    header = task.model_dump_json().encode("utf-8")
    return _HEADER.pack(len(header)) + header + archive


def unframe(data: bytes) -> tuple[Task, bytes]:
    (size,) = _HEADER.unpack_from(data)
    header = data[_HEADER.size : _HEADER.size + size]
    return Task.model_validate_json(header), data[_HEADER.size + size :]


#: beside the recordings: where scoring processes' stderr goes
LOGS_DIR = ".score-process-logs"


def log_dir(recordings_dir: Path) -> Path:
    """Where scoring processes' stderr goes: beside the recordings, never inside a sealed one."""
    path = recordings_dir / LOGS_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


#: how long a submit's hold waits for its MCP call to be logged before letting the scoring process in
HOLD_SECONDS = 10.0
#: how long a scoring process waits for the recording while its server logs the submit call
CLAIM_SECONDS = 30.0


def finish_hand_off(session: Session) -> None:
    """This process writes nothing more into the recording: its event log is closed and its hold
    released, so the scoring process can claim it (idempotent)."""
    with session.lock:
        if session.owner is None or not session.owner.held:
            return
        session.log_pending = False
        session.events.close()
        session.release()


@contextlib.contextmanager
def logging_into(session: Session | None) -> Iterator[EventLog | None]:
    """Where an MCP call about `session` is logged: its recording while this process holds it
    (the call that submitted included: logging it ends the hold), else None (the server's log)."""
    if session is None or not session.handed_off:
        yield session.events if session is not None else None
        return
    with session.lock:
        yield session.events if session.log_pending else None
        finish_hand_off(session)


def hand_off(session: Session, *, hold_for_log: bool = False) -> None:
    """Give the session's queued job to a new detached scoring process, which claims the recording
    once this process lets it go: at once, or (`hold_for_log`) once the submitting MCP call is
    logged (mcp_server logs a call after it answers), at the latest after HOLD_SECONDS."""
    rec = session.record
    assert rec.job is not None
    data = frame(session.task, contamination.held_golden(session.task))
    with session.lock:
        session.save()
        session.events.sync()
        session.handed_off = True
        session.log_pending = hold_for_log
    if hold_for_log:
        timer = threading.Timer(HOLD_SECONDS, finish_hand_off, (session,))
        timer.daemon = True
        timer.start()
    else:
        finish_hand_off(session)
    package_root = str(Path(bridge.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    log_path = log_dir(session.dir.parent) / f"{rec.session_id}-{rec.job.job_id}.log"
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bridge.sessions.score_process", str(session.dir), rec.job.job_id],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd="/",
                env=env,
                start_new_session=True,  # its own session and process group: the client's signals miss it
                close_fds=True,
            )
    except OSError:  # no process (e.g. out of descriptors): the job stays queued and is resumed (docstring)
        return
    session.score_process = proc
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except OSError:  # it died at once: the job stays queued, unheld, and is resumed (docstring)
        pass


def refresh(session: Session) -> None:
    """A handed-off session's record as its scoring process last saved it."""
    with contextlib.suppress(BridgeError, OSError):
        session.record = load_record(session.dir)


def unfinished(session: Session) -> bool:
    return session.record.job is not None and session.record.job.state in ("queued", "running")


def orphaned(session: Session) -> bool:
    """A handed-off job whose scoring process is gone before finishing it (killed, or it never
    started) and that no other process took over: this process may resume it."""
    proc = session.score_process
    if not ((proc is None or proc.poll() is not None) and unfinished(session)):
        return False
    finish_hand_off(session)  # a hold kept for the submit call's log has nobody to wait for now
    return not held_elsewhere(session.dir)


def wait(session: Session, seconds: float) -> None:
    """Wait up to `seconds` for a handed-off job to finish (its record is re-read meanwhile)."""
    deadline = time.monotonic() + seconds
    refresh(session)
    while unfinished(session) and time.monotonic() < deadline:
        proc = session.score_process
        if proc is None or proc.poll() is not None:
            refresh(session)
            return
        time.sleep(0.2)
        refresh(session)


# --------------------------------------------------------------------------- in the scoring process


def private_scratch() -> tuple[Path, int, str | None]:
    """A fresh folder only this process (and its children) can see: a tmpfs mounted on it in a
    private mount namespace. Returns it, a descriptor holding a shared `flock` on the folder
    itself (`sweep_scratch` leaves it alone while this process lives) and None, or with a plain
    0700 folder the reason for the fallback."""
    folder = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the host's folder, not the tmpfs
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:
        mount_private_tmpfs(folder)
    except Unsupported as exc:  # the one fallback: a plain 0700 folder, the gap recorded
        return folder, fd, f"no private mount namespace ({exc})"
    return folder, fd, None


def drop_scratch(folder: Path, private: bool) -> None:
    if private:
        unmount(folder)
    shutil.rmtree(folder, ignore_errors=True)


def sweep_scratch(temp_dir: Path | None = None) -> None:
    """Remove the mount points (empty from outside) or fallback folders of scoring processes
    that were killed; a live one's folder is not touched (its process holds the flock below)."""
    root = Path(temp_dir or tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for path in root.iterdir():
            if path.name.startswith(SCRATCH_PREFIX) and path.is_dir() and not path.is_symlink():
                if not _scratch_in_use(path):
                    shutil.rmtree(path, ignore_errors=True)


def _scratch_in_use(folder: Path) -> bool:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def score_job(rec_dir: Path, job_id: str, task: Task, archive: bytes, scratch: Path, gap: str | None) -> int:
    """Claim the recording and score its job (the caller has set up `scratch`)."""
    deadline = time.monotonic() + CLAIM_SECONDS
    owner = OwnerLock.take(rec_dir)
    while owner is None and time.monotonic() < deadline:  # the server may still log the submit call
        time.sleep(0.1)
        owner = OwnerLock.take(rec_dir)
    if owner is None:
        return 0  # another process holds it: it scores (or resumes) the job
    session: Session | None = None
    try:
        record = load_record(rec_dir)
        if record.job is None or record.job.job_id != job_id or record.job.state not in ("queued", "running"):
            return 0
        session = Session(record, rec_dir, task, owner=owner)
        if gap:
            session.events.append(contamination.WARNING_EVENT, message=f"golden files staged in {scratch}: {gap}")
        jobs.score_in_slot(session, golden_scorer(archive, scratch / "golden"))
        return 0
    finally:
        if session is not None:
            session.events.close()
        owner.release()


def golden_scorer(archive: bytes, dest: Path) -> Scorer:
    """The Docker engine scoring with the golden files of `archive` unpacked into `dest` (inside
    the job, so a bad archive is a recorded job failure like any other)."""
    from bridge.scoring.run.engine import default_scorer  # lazy: docker only when scoring

    engine = default_scorer()

    def score(task: Task, repo_dir: Path, request: ScoreRequest, progress: ProgressFn, /) -> ScoreResult:
        return engine(contamination.unpack_golden(task, archive, dest), repo_dir, request, progress)

    return score


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(
            "usage: python -m bridge.sessions.score_process RECORDING JOB_ID (started by the bridge)", file=sys.stderr
        )
        return 2
    data = sys.stdin.buffer.read()
    not_dumpable()
    scratch, lock_fd, gap = private_scratch()
    try:
        os.environ["TMPDIR"] = str(scratch)
        tempfile.tempdir = None  # re-read: every temporary folder of scoring goes into the scratch
        task, archive = unframe(data)
        del data
        return score_job(Path(args[0]), args[1], task, archive, scratch, gap)
    finally:
        os.close(lock_fd)
        drop_scratch(scratch, private=gap is None)


if __name__ == "__main__":
    sys.exit(main())
