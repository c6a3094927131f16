"""Who holds a session: an flock on the recording's owner.lock, not a pid file. A crashed
holder frees the session at once, a recycled pid never makes a session look held, and of two
processes re-attaching one recording only one gets it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bridge.errors import SessionError
from bridge.sessions.manager import SessionManager
from bridge.sessions.ownership import OwnerLock, held_elsewhere
from bridge.tasks.catalog import Catalog

REPO_ROOT = Path(__file__).resolve().parent.parent

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from bridge.sessions.manager import SessionManager
    from bridge.tasks.catalog import Catalog

    tasks, rec, ws = (Path(a) for a in sys.argv[1:4])
    mgr = SessionManager(Catalog.from_options(tasks), recordings_dir=rec)
    print(mgr.start("word-duel", ws).session_id, flush=True)
    time.sleep(600)
    """
)


def _holder(tmp_path: Path, tasks_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tasks_dir), str(tmp_path / "rec"), str(tmp_path / "ws")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert proc.stdout is not None
    sid = proc.stdout.readline().strip()
    assert sid, "the holder did not start its session"
    return proc, sid


def test_a_session_held_by_a_live_process_is_not_taken_and_a_killed_holder_frees_it(
    tmp_path: Path, tasks_dir: Path
) -> None:
    proc, sid = _holder(tmp_path, tasks_dir)
    rec_dir = tmp_path / "rec" / sid
    try:
        assert held_elsewhere(rec_dir)
        assert OwnerLock.take(rec_dir) is None
        mgr = SessionManager(Catalog.from_options(tasks_dir), recordings_dir=tmp_path / "rec")
        try:
            assert sid not in mgr.sessions  # not re-attached at start-up
            with pytest.raises(SessionError, match="owned by a running bridge process"):
                mgr.attach(sid)
        finally:
            mgr.close()
    finally:
        proc.send_signal(signal.SIGKILL)  # no clean-up of any kind
        proc.wait(10)
    assert (rec_dir / "owner.pid").is_file()  # the dead holder's pid file is still there
    assert not held_elsewhere(rec_dir)
    mgr = SessionManager(Catalog.from_options(tasks_dir), recordings_dir=tmp_path / "rec")
    try:
        assert sid in mgr.sessions  # re-attached: the kernel dropped the dead holder's lock
        assert not held_elsewhere(rec_dir)  # ours, not someone else's
    finally:
        mgr.close()
    assert not held_elsewhere(rec_dir) and not (rec_dir / "owner.pid").exists()


def test_a_recycled_pid_in_owner_pid_does_not_make_a_session_look_held(tmp_path: Path, tasks_dir: Path) -> None:
    """The owner died, and its pid now belongs to an unrelated live process (here: our parent)."""
    mgr = SessionManager(Catalog.from_options(tasks_dir), recordings_dir=tmp_path / "rec")
    sid = mgr.start("word-duel", tmp_path / "ws").session_id
    mgr.close()
    rec_dir = tmp_path / "rec" / sid
    (rec_dir / "owner.pid").write_text(str(os.getppid()), encoding="ascii")
    assert not held_elsewhere(rec_dir)
    again = SessionManager(Catalog.from_options(tasks_dir), recordings_dir=tmp_path / "rec")
    try:
        assert sid in again.sessions
    finally:
        again.close()


def test_one_process_holds_a_recording_once(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    rec_dir.mkdir()
    first = OwnerLock.take(rec_dir)
    assert first is not None and first.held
    assert OwnerLock.take(rec_dir) is None  # not twice, even from this process
    assert not held_elsewhere(rec_dir)  # this process is not "elsewhere"
    first.release()
    first.release()  # idempotent
    second = OwnerLock.take(rec_dir)
    assert second is not None
    second.release()


def test_the_lock_file_is_never_opened_through_a_symlink(tmp_path: Path) -> None:
    rec_dir = tmp_path / "rec"
    rec_dir.mkdir()
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (rec_dir / "owner.lock").symlink_to(target)
    with pytest.raises(SessionError, match="owner.lock"):
        OwnerLock.take(rec_dir)
    assert target.read_text() == "keep"
