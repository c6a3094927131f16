"""Recorder tests with real watchdog observers (inotify, and the polling fallback)."""

from __future__ import annotations

import errno
import hashlib
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.fs.hashing import tree_hash
from bridge.fs.ignore import is_temp_file
from bridge.recording.events import EventLog, load_events
from bridge.recording.manifest import scan
from bridge.recording.store import ShadowStore
from bridge.sessions.recorder import Recorder
from bridge.sessions.settings import RecorderSettings
from bridge.sessions.watch import SelectiveInotifyEmitter

SETTLE = 0.3
FILE_EVENTS = {"file_created", "file_modified", "file_deleted", "file_moved"}


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


class Rig:
    def __init__(self, tmp: Path, **kw: Any) -> None:
        self.ws = tmp / "ws"
        self.ws.mkdir(exist_ok=True)
        self.rec_dir = tmp / "rec"
        self.rec_dir.mkdir(exist_ok=True)
        self.log = EventLog(self.rec_dir / "events.jsonl")
        self.store = ShadowStore(self.rec_dir / "shadow.git", self.ws)
        options = {name: kw.pop(name) for name in list(kw) if name in RecorderSettings.__dataclass_fields__}
        options.setdefault("settle_seconds", SETTLE)
        kw.setdefault("raw_log", self.rec_dir / "raw.log")
        self.rec = Recorder(self.ws, event_log=self.log, store=self.store, settings=RecorderSettings(**options), **kw)

    def events(self) -> list[dict[str, Any]]:
        recs, bad = load_events(self.log.path)
        assert bad == 0
        return recs

    def file_events(self, path: str | None = None) -> list[dict[str, Any]]:
        return [
            e for e in self.events()
            if e["type"] in FILE_EVENTS and (path is None or e["path"] == path or e.get("dest") == path)
        ]  # fmt: skip

    def last_state(self, path: str) -> dict[str, Any] | None:
        """The recorded state of `path` after replaying the log of record."""
        return self.replayed().get(path)

    def replayed(self) -> dict[str, dict[str, Any] | None]:
        """Every path's recorded state after replaying the log of record (read once: a check of
        many paths that replays the whole log for each one is quadratic in the log's length)."""
        state: dict[str, dict[str, Any] | None] = {}
        for e in self.file_events():
            if e["type"] == "file_moved":
                state[e["dest"]] = e
                state[e["path"]] = None
            elif e["type"] == "file_deleted":
                state[e["path"]] = None
            else:
                state[e["path"]] = e
        return state

    def wait_for(self, pred: Callable[[], bool], timeout: float = 5.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return True
            time.sleep(0.02)
        return pred()

    def assert_no_temp_names(self) -> None:
        for e in self.file_events():
            for key in ("path", "dest"):
                if key in e:
                    assert not is_temp_file(Path(e[key]).name), e


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path)
    yield r
    r.rec.stop()
    r.log.close()


def started(r: Rig) -> Rig:
    r.rec.start()
    return r


def test_basic_create_modify_delete_move(rig: Rig) -> None:
    started(rig)
    ws = rig.ws
    (ws / "a.py").write_text("one")
    assert rig.wait_for(lambda: rig.last_state("a.py") is not None)
    (ws / "a.py").write_text("two")
    assert rig.wait_for(lambda: (rig.last_state("a.py") or {}).get("sha256") == sha("two"))
    os.chmod(ws / "a.py", 0o755)
    assert rig.wait_for(lambda: (rig.last_state("a.py") or {}).get("mode") == "100755")
    os.rename(ws / "a.py", ws / "b.py")
    assert rig.wait_for(lambda: any(e["type"] == "file_moved" for e in rig.file_events()))
    mv = [e for e in rig.file_events() if e["type"] == "file_moved"][0]
    assert (mv["path"], mv["dest"], mv["sha256"]) == ("a.py", "b.py", sha("two"))
    (ws / "b.py").unlink()
    assert rig.wait_for(lambda: rig.file_events()[-1]["type"] == "file_deleted")
    s = rig.rec.seal(quiet_seconds=0.3)
    assert s.stable and s.reconciled == 0 and len(s.manifest) == 0
    created = rig.file_events()[0]
    assert created["type"] == "file_created" and created["sha256"] == sha("one") and created["size"] == 3
    assert rig.rec.files_changed == 2


def test_vscode_truncate_then_write(rig: Rig) -> None:
    (rig.ws / "app.py").write_text("original content\n")
    started(rig)
    with open(rig.ws / "app.py", "r+b") as fh:
        fh.truncate(0)
        fh.flush()
        time.sleep(SETTLE * 1.5)  # the 0-byte state outlives one settle delay
        fh.write(b"saved by vscode\n")
    s = rig.rec.seal(quiet_seconds=0.5)
    evs = rig.file_events("app.py")
    assert [e["sha256"] for e in evs] == [sha("saved by vscode\n")]
    assert all(e["size"] > 0 for e in evs) and not any(e.get("synthetic") for e in evs)
    assert s.manifest["app.py"].sha256 == sha("saved by vscode\n")


def test_temp_file_then_rename(rig: Rig) -> None:
    (rig.ws / "f.py").write_text("old")
    started(rig)
    tmp = rig.ws / "f.py.tmp.1234"
    tmp.write_text("new via rename")
    os.replace(tmp, rig.ws / "f.py")
    s = rig.rec.seal(quiet_seconds=0.5)
    assert rig.last_state("f.py")["sha256"] == sha("new via rename")  # type: ignore[index]
    assert s.reconciled == 0
    rig.assert_no_temp_names()
    assert "f.py.tmp.1234" in (rig.rec_dir / "raw.log").read_text()  # kept in the raw debug log


def test_jetbrains_safe_write(rig: Rig) -> None:
    (rig.ws / "src").mkdir()
    (rig.ws / "src" / "X.java").write_text("class X {}")
    started(rig)
    d = rig.ws / "src"
    (d / "X.java___jb_tmp___").write_text("class X { int y; }")
    os.rename(d / "X.java", d / "X.java___jb_old___")
    os.rename(d / "X.java___jb_tmp___", d / "X.java")
    (d / "X.java___jb_old___").unlink()
    s = rig.rec.seal(quiet_seconds=0.5)
    evs = rig.file_events("src/X.java")
    assert [(e["type"], e["sha256"]) for e in evs] == [("file_modified", sha("class X { int y; }"))]
    assert s.reconciled == 0
    rig.assert_no_temp_names()


def test_vim_backup_and_replace(rig: Rig) -> None:
    (rig.ws / "main.py").write_text("v1\n")
    started(rig)
    ws = rig.ws
    (ws / ".main.py.swp").write_bytes(b"\0swap")
    (ws / "4913").write_text("")
    (ws / "4913").unlink()
    os.rename(ws / "main.py", ws / "main.py~")
    (ws / "main.py").write_text("v2 from vim\n")
    os.unlink(ws / "main.py~")
    (ws / ".main.py.swp").unlink()
    s = rig.rec.seal(quiet_seconds=0.5)
    evs = rig.file_events("main.py")
    assert [(e["type"], e["sha256"]) for e in evs] == [("file_modified", sha("v2 from vim\n"))]
    assert s.reconciled == 0 and set(s.manifest) == {"main.py"}
    rig.assert_no_temp_names()


def test_mkdir_p_then_immediate_write(rig: Rig) -> None:
    started(rig)
    (rig.ws / "a" / "b" / "c").mkdir(parents=True)
    (rig.ws / "a" / "b" / "c" / "f.txt").write_text("deep")
    (rig.ws / "a" / "b" / "g.txt").write_text("mid")
    s = rig.rec.seal(quiet_seconds=0.5)
    assert rig.last_state("a/b/c/f.txt")["sha256"] == sha("deep")  # type: ignore[index]
    assert rig.last_state("a/b/g.txt")["sha256"] == sha("mid")  # type: ignore[index]
    assert {"a", "a/b", "a/b/c"} <= rig.rec.watched_dirs()
    # the new watches work: a later write deep down is seen without reconciliation
    (rig.ws / "a" / "b" / "c" / "later.txt").write_text("later")
    assert rig.wait_for(lambda: rig.last_state("a/b/c/later.txt") is not None)
    assert set(s.manifest) == {"a/b/c/f.txt", "a/b/g.txt"}


def test_directory_move_keeps_watches_and_records_moves(rig: Rig) -> None:
    (rig.ws / "pkg" / "sub").mkdir(parents=True)
    (rig.ws / "pkg" / "sub" / "m.py").write_text("m")
    (rig.ws / "pkg" / "n.py").write_text("n")
    started(rig)
    os.rename(rig.ws / "pkg", rig.ws / "lib")
    assert rig.wait_for(lambda: len([e for e in rig.file_events() if e["type"] == "file_moved"]) == 2)
    (rig.ws / "lib" / "sub" / "m.py").write_text("m2")
    assert rig.wait_for(lambda: (rig.last_state("lib/sub/m.py") or {}).get("sha256") == sha("m2"))
    s = rig.rec.seal(quiet_seconds=0.3)
    assert set(s.manifest) == {"lib/sub/m.py", "lib/n.py"} and s.reconciled == 0
    assert "pkg" not in rig.rec.watched_dirs() and {"lib", "lib/sub"} <= rig.rec.watched_dirs()


def test_excluded_dirs_are_not_watched_nor_recorded(rig: Rig) -> None:
    for d in ("node_modules/left-pad/lib", ".venv/lib/python3.11", ".git/objects", "src/__pycache__", "x.egg-info"):
        (rig.ws / d).mkdir(parents=True)
    (rig.ws / "node_modules" / "left-pad" / "index.js").write_text("module.exports=1")
    started(rig)
    watched = rig.rec.watched_dirs()
    assert watched == {"", "src"}
    (rig.ws / "node_modules" / "left-pad" / "lib" / "new.js").write_text("x")
    (rig.ws / ".venv" / "lib" / "python3.11" / "site.py").write_text("x")
    (rig.ws / "src" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    (rig.ws / "build").mkdir()  # created later: still never watched
    (rig.ws / "build" / "out.o").write_bytes(b"\0")
    (rig.ws / "src" / "real.py").write_text("real")
    s = rig.rec.seal(quiet_seconds=0.5)
    assert [e["path"] for e in rig.file_events()] == ["src/real.py"]
    assert set(s.manifest) == {"src/real.py"}
    assert rig.rec.watched_dirs() == {"", "src"}


def test_event_storm_nothing_missed(tmp_path: Path) -> None:
    r = Rig(tmp_path, raw_log=None)
    (r.ws / "node_modules" / "dep").mkdir(parents=True)
    r.rec.start()
    try:
        rnd = random.Random(7)
        paths = [f"d{i % 40}/sub{i % 3}/f{i}.py" for i in range(400)]
        for n in range(4000):
            p = r.ws / paths[rnd.randrange(len(paths))]
            if not p.parent.is_dir():
                p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(os.urandom(rnd.randrange(0, 200)))
            if n % 97 == 0:
                os.chmod(p, 0o755)
            if n % 151 == 0 and p.exists():
                p.unlink()
            if n % 10 == 0:
                (r.ws / "node_modules" / "dep" / f"x{n}.js").write_text("y")
        s = r.rec.seal(quiet_seconds=0.5, tag="refs/rgbridge/submission")
        disk = scan(r.ws)
        assert s.stable
        assert {p: (e.sha256, e.mode) for p, e in s.manifest.items()} == {
            p: (e.sha256, e.mode) for p, e in disk.items()
        }
        assert s.tree_hash == tree_hash(r.ws) == r.store.tree_hash_of(s.commit)
        assert r.store.resolve("refs/rgbridge/submission") == s.commit
        out = tmp_path / "replay"
        r.store.checkout_to(s.commit, out)
        for rel in disk:
            a, b = r.ws / rel, out / rel
            assert a.read_bytes() == b.read_bytes(), rel
            assert (a.stat().st_mode & 0o111 != 0) == (b.stat().st_mode & 0o111 != 0), rel
        assert tree_hash(out) == s.tree_hash
        # replaying the log of record (live + synthetic events) also reproduces the sealed state
        state = r.replayed()
        assert {p for p in disk if state.get(p) is not None} == set(disk)
        for p, e in disk.items():
            assert state[p]["sha256"] == e.sha256  # type: ignore[index]
        assert not any("node_modules" in e["path"] for e in r.file_events())
    finally:
        r.rec.stop()
        r.log.close()


def test_polling_mode_records_changes(tmp_path: Path) -> None:
    r = Rig(tmp_path, force_polling=True, poll_interval=0.2)
    (r.ws / "node_modules").mkdir()
    r.rec.start()
    try:
        assert r.rec.mode == "polling" and r.rec.degraded is None and r.rec.watched_dirs() == set()
        (r.ws / "p.py").write_text("poll me")
        (r.ws / "node_modules" / "n.js").write_text("no")
        assert r.wait_for(lambda: r.last_state("p.py") is not None)
        (r.ws / "p.py").write_text("poll me again, longer")
        assert r.wait_for(lambda: (r.last_state("p.py") or {}).get("sha256") == sha("poll me again, longer"))
        (r.ws / "p.py").unlink()
        assert r.wait_for(lambda: r.last_state("p.py") is None)
        assert not any(e["path"].startswith("node_modules") for e in r.file_events())
    finally:
        r.rec.stop()
        r.log.close()


def test_watch_limit_falls_back_to_polling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_watches(self: Any, top: str, *, simulate: bool) -> None:
        raise OSError(errno.ENOSPC, "inotify watch limit reached")

    monkeypatch.setattr(SelectiveInotifyEmitter, "_add_tree", no_watches)
    r = Rig(tmp_path, poll_interval=0.2)
    r.rec.start()
    try:
        assert r.rec.mode == "polling"
        assert r.rec.degraded and "watch limit" in r.rec.degraded
        assert any(e["type"] == "recorder_degraded" for e in r.events())
        (r.ws / "still.py").write_text("recorded")
        assert r.wait_for(lambda: r.last_state("still.py") is not None)
    finally:
        r.rec.stop()
        r.log.close()


def test_sentinel_triggers_callback(tmp_path: Path) -> None:
    fired = threading.Event()
    r = Rig(tmp_path, on_sentinel=fired.set)
    r.rec.start()
    try:
        (r.ws / ".rgbridge").mkdir()
        (r.ws / ".rgbridge" / "SUBMIT").write_text("")
        assert fired.wait(5)
        assert any(e["type"] == "sentinel" for e in r.events())
        assert not any(e["path"].startswith(".rgbridge") for e in r.file_events())
    finally:
        r.rec.stop()
        r.log.close()


def test_checkpoints_commit_settled_states(rig: Rig) -> None:
    rig.rec.checkpoint_interval = 0.0
    rig.rec.checkpoint_quiet = 0.3
    started(rig)
    (rig.ws / "a.txt").write_text("A")
    assert rig.wait_for(lambda: sum(e["type"] == "checkpoint" for e in rig.events()) >= 2, timeout=5)
    log = rig.store.log()
    assert len(log) == 2  # start + one settled batch
    ck = [e for e in rig.events() if e["type"] == "checkpoint"]
    assert ck[-1]["reason"] == "auto" and ck[-1]["changes"] == 1
    c = rig.rec.checkpoint("manual")
    assert c.commit == log[-1].commit and c.changes == []  # unchanged tree: same commit


def test_lost_events_are_reconciled_with_synthetic_events(rig: Rig) -> None:
    started(rig)
    rig.rec._watch.stop()  # simulate lost events: nobody is watching
    (rig.ws / "ghost.txt").write_text("unseen")
    s = rig.rec.seal(quiet_seconds=0.1)
    ev = rig.file_events("ghost.txt")
    assert ev and ev[0]["synthetic"] is True and ev[0]["sha256"] == sha("unseen")
    assert s.reconciled == 1 and "ghost.txt" in s.manifest
    rec = [e for e in rig.events() if e["type"] == "reconcile"][-1]
    assert rec["created"] == 1


def test_root_deleted_is_logged_and_degrades(rig: Rig) -> None:
    (rig.ws / "x.py").write_text("x")
    started(rig)
    shutil.rmtree(rig.ws)
    assert rig.wait_for(lambda: rig.rec.degraded is not None)
    assert "root deleted" in (rig.rec.degraded or "")
    assert rig.wait_for(lambda: rig.last_state("x.py") is None)


def test_directory_swapped_for_symlink_is_never_read_through(rig: Rig, tmp_path: Path) -> None:
    """Issue 8, opening 4: `mkdir e && mv e e2 && ln -s /etc e` made the recorder record /etc."""
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "shadow").write_text("SECRET-root-hash")
    (outside / "passwd").write_text("SECRET-passwd")
    secrets = {sha("SECRET-root-hash"), sha("SECRET-passwd")}
    started(rig)
    (rig.ws / "e").mkdir()
    (rig.ws / "e" / "shadow").write_text("mine")
    (rig.ws / "e" / "passwd").write_text("mine too")
    os.rename(rig.ws / "e", rig.ws / "e2")
    os.symlink(outside, rig.ws / "e")
    (rig.ws / "after.txt").write_text("x")
    assert rig.wait_for(lambda: rig.last_state("after.txt") is not None)
    s = rig.rec.seal(quiet_seconds=0.3)
    recorded = {e.get("sha256") for e in rig.file_events()} | {entry.sha256 for entry in s.manifest.values()}
    assert not recorded & secrets, "the recorder read through a symlinked directory"
    assert not any(p.startswith("e/") for p in s.manifest)
    link = s.manifest.get("e")
    assert link is None or link.is_symlink
    assert rig.store.has_content(sha("mine")) and not any(rig.store.has_content(x) for x in secrets)
