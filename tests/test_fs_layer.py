"""Build 1 of issue 8: one set of ignore rules for every reader of a workspace, so the recorder's
tree hash and the engine's snapshot hash of the same workspace are the same number."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from bridge.fs import ignore
from bridge.fs.hashing import tree_hash
from bridge.scoring.run.workdir import stage_repo
from bridge.sessions.manager import SessionManager
from bridge.sessions.settings import SessionSettings
from bridge.tasks.catalog import Catalog

TASK = "word-duel"
# Files the recorder left out but upstream's copy kept, or the other way round, before the rules met.
JUNK = {
    ".DS_Store": b"\0\0\0\1Bud1",
    "game.pyc": b"\x6f\x0d\x0d\x0a",
    "notes.md.swp": b"vim",
    "build/lib/app.py": b"print('built')\n",
    "pkg.egg-info/PKG-INFO": b"Name: x\n",
    "sub/.DS_Store": b"x",
    "sub/mod.pyc": b"x",
}


def _workspace(tasks_dir: Path, ws: Path) -> None:
    for item in (tasks_dir / TASK / "solution").iterdir():
        if item.is_file():
            shutil.copy2(item, ws / item.name)
    for rel, data in JUNK.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_bytes(data)
    (ws / "sub" / "keep.py").write_text("X = 1\n")


def test_upstream_ignore_list_is_within_the_one_rule_set() -> None:
    assert ".git" in ignore.UPSTREAM_COPY_IGNORE and "*.pyc" in ignore.UPSTREAM_COPY_IGNORE
    for pattern in ignore.UPSTREAM_COPY_IGNORE:
        if pattern.startswith("*"):
            assert ignore.is_ignored_file("x" + pattern[1:])
        else:
            assert ignore.is_excluded_dir(pattern) or ignore.is_ignored_file(pattern)


def test_staging_for_scoring_hashes_as_the_recorder_hashes(tmp_path: Path, tasks_dir: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _workspace(tasks_dir, ws)
    staged = tmp_path / "staged"
    stage_repo(ws, staged)
    assert tree_hash(staged) == tree_hash(ws)
    for rel in JUNK:
        assert not (staged / rel).exists(), rel


def test_recorded_tree_hash_equals_the_engines_snapshot_hash(tmp_path: Path, tasks_dir: Path, docker_client) -> None:
    from bridge.scoring.run.engine import default_scorer

    mgr = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp_path / "rec",
        scorer=default_scorer(),
        settings=SessionSettings(seal_quiet_seconds=0.3),
    )
    try:
        status = mgr.start(TASK, tmp_path / "ws")
        _workspace(tasks_dir, tmp_path / "ws")
        time.sleep(0.5)
        receipt = mgr.submit(status.session_id)
        result = mgr.result(status.session_id, wait_seconds=600)
        assert result.state == "done", result.message
        assert result.result is not None
        assert result.result["snapshot_hash"] == receipt.tree_hash
        out = Path(status.recording) / mgr.sessions[status.session_id].record.job.result_dir
        assert not (out / "snapshot-hash-note.txt").exists()
        assert json.loads((out / "result.json").read_text())["snapshot_hash"] == receipt.tree_hash
    finally:
        mgr.close()


def test_walk_never_enters_a_directory_swapped_for_a_symlink_after_it_was_listed(tmp_path: Path) -> None:
    """Every reader walks with bridge/fs (fd-relative, O_NOFOLLOW at the moment a folder is
    entered): a sibling folder swapped for a link to outside while the walk runs is left out."""
    from bridge.fs.hashing import walk_files

    root, outside = tmp_path / "ws", tmp_path / "outside"
    outside.mkdir()
    (outside / "SECRET").write_text("shadow")
    for i in range(8):
        (root / f"d{i}").mkdir(parents=True)
        (root / f"d{i}" / "f.txt").write_text(str(i))
    seen: list[str] = []
    for rel, _entry in walk_files(root):
        if not seen:  # the root was listed; now swap every folder not entered yet
            first = rel.split("/")[0]
            for d in sorted(root.iterdir()):
                if d.name != first:
                    d.rename(tmp_path / f"moved-{d.name}")
                    os.symlink(outside, d)
        seen.append(rel)
    assert not any(r.endswith("SECRET") for r in seen), seen
    assert len(seen) == 1
    # Hashing and staging for scoring read through the same walk.
    staged = tmp_path / "staged"
    stage_repo(root, staged)
    assert sorted(p.name for p in staged.iterdir()) == sorted(p.name for p in root.iterdir())
    assert all((staged / p.name).is_symlink() for p in root.iterdir() if p.is_symlink())
    assert tree_hash(staged) == tree_hash(root)


def test_verify_reads_the_recording_through_bridge_fs_and_never_opens_a_fifo(tmp_path: Path) -> None:
    """integrity walks fd-relative too: a FIFO planted in a store made `recordings verify` block
    forever on open(); now it is listed as a special file and the change is reported."""
    import threading

    from bridge.recording.verify import verify_recording

    sample = Path(__file__).resolve().parent.parent / "recordings" / "samples" / "kv-ledger-sample"
    rec = tmp_path / "rec"
    shutil.copytree(sample, rec)
    assert verify_recording(rec).ok  # the sealed digest order is unchanged by the new walk
    os.mkfifo(rec / "store" / "objects" / "fifo")
    box: dict[str, object] = {}
    worker = threading.Thread(target=lambda: box.update(report=verify_recording(rec)), daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():  # unblock the old behaviour's open() so the test process can exit
        with open(rec / "store" / "objects" / "fifo", "wb"):
            pass
        pytest.fail("verify blocked on a FIFO in the store")
    report = box["report"]
    assert not report.ok and any("store/objects" in p for p in report.problems), report.problems
