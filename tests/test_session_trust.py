"""Issue 8, openings 3 and 8(c, d): the workspace marker is untrusted, a killed bridge leaves a
consistent clock, and `rgbridge submit` acts on the one named session."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bridge.errors import SessionError
from bridge.sessions.attach import read_marker
from bridge.sessions.live import find_recording_for_workspace, load_record
from bridge.sessions.manager import SessionManager
from bridge.sessions.models import SessionStatus
from bridge.sessions.settings import SessionSettings
from bridge.tasks.catalog import Catalog
from tests.helpers import CountingScorer

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def tasks_copy(tmp_path: Path, tasks_dir: Path) -> Path:
    out = tmp_path / "tasks"
    shutil.copytree(tasks_dir / "kv-ledger", out / "kv-ledger")
    return out


def rgbridge(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "bridge.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO_ROOT,
    )


def start_and_leave(tasks: Path, rec: Path, workspace: Path, **kw) -> SessionStatus:
    """A session started by a bridge process that then went away (its recording stays open)."""
    mgr = SessionManager(
        Catalog.from_options(tasks),
        recordings_dir=rec,
        scorer=CountingScorer(),
        settings=SessionSettings(**kw),
    )
    try:
        return mgr.start("kv-ledger", workspace)
    finally:
        mgr.close()


def test_marker_holds_only_the_session_id(tmp_path: Path, tasks_copy: Path) -> None:
    st = start_and_leave(tasks_copy, tmp_path / "rec", tmp_path / "ws")
    marker = json.loads((tmp_path / "ws" / ".rgbridge" / "session.json").read_text())
    assert marker == {"session_id": st.session_id}
    assert find_recording_for_workspace(tmp_path / "rec", tmp_path / "ws") == Path(st.recording)


def test_forged_marker_does_not_reattach_or_submit(tmp_path: Path, tasks_copy: Path) -> None:
    """The opening-3 attack: the agent rewrites the marker to point at a fake recording (in its
    workspace) whose workspace is the task folder; `rgbridge submit` must not re-attach it,
    submit anything, or create a store inside the workspace."""
    rec = tmp_path / "rec"
    real = start_and_leave(tasks_copy, rec, tmp_path / "ws")
    ws = Path(real.workspace)
    task_dir = tasks_copy / "kv-ledger"
    fake = ws / "fake"
    fake.mkdir()
    forged = load_record(Path(real.recording)).model_dump(mode="json")
    forged.update(workspace=str(task_dir), session_id="20250101T000000Z-kv-ledger-abcdef", owner=None)
    (fake / "session.json").write_text(json.dumps(forged))
    # 1. the old format: an absolute recording path
    (ws / ".rgbridge" / "session.json").write_text(
        json.dumps({"session_id": forged["session_id"], "recording": str(fake)})
    )
    # 2. a real recording (in the recordings folder) whose workspace is the task folder
    planted = rec / forged["session_id"]
    planted.mkdir()
    (planted / "session.json").write_text(json.dumps(forged))
    before = {p.relative_to(task_dir) for p in task_dir.rglob("*")}

    proc = rgbridge(
        "submit", "--workspace", str(ws), "--recordings", str(rec), "--task-dir", str(tasks_copy), "--no-wait"
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "no session recorded" in proc.stderr
    assert not list(ws.rglob("store")), "a store was created inside the workspace"
    assert not (planted / "store").exists()
    assert load_record(planted).state == "active" and load_record(planted).submission is None
    assert {p.relative_to(task_dir) for p in task_dir.rglob("*")} == before
    assert load_record(Path(real.recording)).state == "active"  # the real session was not submitted either

    # A server start (re-attach of every open session) refuses the planted recording too.
    mgr2 = SessionManager(Catalog.from_options(tasks_copy), recordings_dir=rec, scorer=CountingScorer())
    try:
        assert forged["session_id"] not in mgr2.sessions
        assert real.session_id in mgr2.sessions
        assert not (planted / "store").exists()
    finally:
        mgr2.close()


@pytest.mark.parametrize(
    "marker",
    [
        {"session_id": "../ws/fake"},
        {"session_id": "20250101T000000Z-kv-ledger-abcdef/../../x"},
        {"session_id": 7},
        ["not", "an", "object"],
    ],
)
def test_malformed_marker_ids_are_ignored(tmp_path: Path, marker: object) -> None:
    meta = tmp_path / "ws" / ".rgbridge"
    meta.mkdir(parents=True)
    (meta / "session.json").write_text(json.dumps(marker))
    assert read_marker(tmp_path / "ws") is None
    assert find_recording_for_workspace(tmp_path / "rec", tmp_path / "ws") is None


def test_marker_naming_another_workspaces_session_is_refused(tmp_path: Path, tasks_copy: Path) -> None:
    a = start_and_leave(tasks_copy, tmp_path / "rec", tmp_path / "a")
    other = tmp_path / "other"
    (other / ".rgbridge").mkdir(parents=True)
    (other / ".rgbridge" / "session.json").write_text(json.dumps({"session_id": a.session_id}))
    assert find_recording_for_workspace(tmp_path / "rec", other) is None
    # a symlinked metadata folder is not followed
    link = tmp_path / "linked"
    link.mkdir()
    (link / ".rgbridge").symlink_to(Path(a.workspace) / ".rgbridge")
    assert read_marker(link) is None


def test_attach_refuses_recorded_workspace_inside_the_task(tmp_path: Path, tasks_copy: Path) -> None:
    rec = tmp_path / "rec"
    real = start_and_leave(tasks_copy, rec, tmp_path / "ws")
    data = json.loads((Path(real.recording) / "session.json").read_text())
    data["workspace"] = str(tasks_copy / "kv-ledger" / "tests")
    (Path(real.recording) / "session.json").write_text(json.dumps(data))
    mgr2 = SessionManager(
        Catalog.from_options(tasks_copy),
        recordings_dir=rec,
        scorer=CountingScorer(),
        settings=SessionSettings(reattach=False),
    )
    try:
        with pytest.raises(Exception, match="overlaps"):
            mgr2.attach(real.session_id)
        assert mgr2.reattach_all() == []
        with pytest.raises(SessionError, match="invalid session id"):
            mgr2.attach("../" + real.session_id)
    finally:
        mgr2.close()


def test_cli_submit_attaches_only_the_named_session_and_reports_progress(
    tmp_path: Path, tasks_copy: Path, capsys: pytest.CaptureFixture[str], docker_client
) -> None:
    """Opening 8(d): `rgbridge submit --workspace A` with no live server re-attaches A only (B's
    recording is not touched) and waits for scoring, printing progress, with no fixed cap. The
    score comes from the detached scoring process (bridge/sessions/score_process.py): the real engine."""
    from bridge.cli import main as cli

    rec = tmp_path / "rec"
    mgr = SessionManager(
        Catalog.from_options(tasks_copy),
        recordings_dir=rec,
        scorer=CountingScorer(),
        settings=SessionSettings(attempts=2),
    )
    try:
        a = mgr.start("kv-ledger", tmp_path / "a")
        b = mgr.start("kv-ledger", tmp_path / "b")
    finally:
        mgr.close()
    b_events = (Path(b.recording) / "events.jsonl").read_bytes()
    b_record = (Path(b.recording) / "session.json").read_bytes()
    (tmp_path / "a" / "app.py").write_text(f"print({time.time_ns()})\n")  # a snapshot no cache knows
    code = cli(
        [
            "submit",
            "--workspace",
            str(tmp_path / "a"),
            "--recordings",
            str(rec),
            "--task-dir",
            str(tasks_copy),
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["state"] == "done"
    assert "scoring running: " in out.err  # progress while waiting
    assert load_record(Path(a.recording)).state == "scored"
    assert (Path(b.recording) / "events.jsonl").read_bytes() == b_events  # B never re-attached
    assert (Path(b.recording) / "session.json").read_bytes() == b_record
    assert not (Path(b.recording) / "owner.pid").exists()


def test_cli_submit_timeout_is_explicit(
    tmp_path: Path, tasks_copy: Path, capsys: pytest.CaptureFixture[str], docker_client
) -> None:
    from bridge.cli import main as cli

    rec = tmp_path / "rec"
    a = start_and_leave(tasks_copy, rec, tmp_path / "a")
    (tmp_path / "a" / "app.py").write_text(f"print({time.time_ns()})\n")  # real scoring takes seconds
    code = cli(
        [
            "submit",
            "--workspace",
            str(tmp_path / "a"),
            "--recordings",
            str(rec),
            "--task-dir",
            str(tasks_copy),
            "--timeout",
            "1",
        ]
    )
    assert code != 0
    assert "--timeout" in capsys.readouterr().err
    assert load_record(Path(a.recording)).state == "submitted"


def test_reattach_rechecks_the_final_resolved_workspace(tmp_path: Path, tasks_copy: Path) -> None:
    """The recorded workspace path is fine as text, but by now it is a symlink into the task's
    golden tests: the re-attach decides on the resolved path and refuses it."""
    rec = tmp_path / "rec"
    st = start_and_leave(tasks_copy, rec, tmp_path / "ws")
    ws = Path(st.workspace)
    os.rename(ws, tmp_path / "ws-moved")
    ws.symlink_to(tasks_copy / "kv-ledger" / "tests")
    before = sorted(p.name for p in (tasks_copy / "kv-ledger" / "tests").iterdir())
    mgr = SessionManager(
        Catalog.from_options(tasks_copy),
        recordings_dir=rec,
        scorer=CountingScorer(),
        settings=SessionSettings(reattach=False),
    )
    try:
        with pytest.raises(Exception, match="not a resolved absolute path"):
            mgr.attach(st.session_id)
        assert mgr.reattach_all() == [] and st.session_id not in mgr.sessions
    finally:
        mgr.close()
    assert sorted(p.name for p in (tasks_copy / "kv-ledger" / "tests").iterdir()) == before
    assert not (Path(st.recording) / "owner.pid").exists()


@pytest.mark.parametrize("task_id", ["kv-ledger", "é-tâche", "x" * 80, "a.b/c", "..", "日本"])
def test_every_new_session_id_is_well_formed(task_id: str) -> None:
    from bridge.sessions.attach import is_session_id
    from bridge.sessions.opening import new_session_id

    assert is_session_id(new_session_id(task_id))
