"""The pieces of the detached scoring process (bridge/sessions/score_process.py) and of the in-memory
golden files (bridge/sessions/contamination.py), each against the real kernel: the golden
archive round trip, the private scratch folder no other process can see, the machine-wide
scoring slots, and the sweep of what earlier versions and killed processes left behind."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bridge.sessions import contamination, linux, score_process, slots
from bridge.tasks.catalog import Catalog

REPO_ROOT = Path(__file__).resolve().parent.parent


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_the_golden_archive_holds_what_scoring_reads_and_unpacks_to_it(tmp_path: Path, tasks_dir: Path) -> None:
    task = Catalog.from_options(tasks_dir).get("kv-ledger")
    archive = contamination.golden_archive(task)
    assert contamination.held_golden(task) == archive  # one read per task and process
    staged = contamination.unpack_golden(task, archive, tmp_path / "g")
    assert tree(staged.tests_dir) == tree(task.tests_dir)
    assert staged.solution_dir is not None and task.solution_dir is not None
    assert tree(staged.solution_dir) == tree(task.solution_dir)
    assert staged.content_hash == task.content_hash and staged.root == task.root
    # framed for the pipe and back
    again, data = score_process.unframe(score_process.frame(task, archive))
    assert again == task and data == archive


SCRATCH = textwrap.dedent("""
    import sys, time
    from bridge.sessions.score_process import private_scratch
    folder, fd, gap = private_scratch()
    (folder / "secret.py").write_text("golden")
    print(folder, gap or "", flush=True)
    time.sleep(30)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mount namespaces are Linux-only")
def test_the_scratch_folder_is_empty_from_outside_and_survives_no_kill(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", SCRATCH], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        folder, gap = Path(line[0]), " ".join(line[1:])
        if gap:
            pytest.skip(f"no private mount namespace here: {gap}")
        assert folder.parent == tmp_path and folder.is_dir()
        assert list(folder.iterdir()) == []  # the file exists only in the process's own namespace
        score_process.sweep_scratch(tmp_path)
        assert folder.is_dir()  # a live scoring process's folder is left alone
    finally:
        proc.kill()
        proc.wait(10)
    score_process.sweep_scratch(tmp_path)
    assert not folder.exists()  # a killed one's mount point is swept


def test_earlier_versions_golden_copies_are_swept(tmp_path: Path) -> None:
    old = tmp_path / "rgbridge-golden-abc123"
    (old / "tests").mkdir(parents=True)
    (old / "tests" / "test_x.py").write_text("golden\n")
    keep = tmp_path / "something-else"
    keep.mkdir()
    assert contamination.sweep_leftovers(tmp_path) == [old]
    assert not old.exists() and keep.is_dir()


def test_scoring_slots_bound_jobs_across_holders(tmp_path: Path) -> None:
    """Slots are flocked files: two holders (separate descriptors, as two processes) never share one."""
    inside = 0
    peak = 0
    waited: list[int] = []
    lock = threading.Lock()

    def job(i: int) -> None:
        nonlocal inside, peak
        with slots.scoring_slot(2, lambda: waited.append(i), root=tmp_path):
            with lock:
                inside += 1
                peak = max(peak, inside)
            time.sleep(0.3)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=job, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert peak == 2
    assert len(waited) >= 2  # the others were told they wait


def test_off_linux_every_linux_call_takes_the_one_fallback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """bridge/sessions/linux.py on another platform: `Unsupported` from each call, and the
    scratch folder falls back to a plain 0700 folder with the reason."""
    monkeypatch.setattr(linux, "sys", SimpleNamespace(platform="darwin"))
    with pytest.raises(linux.Unsupported, match="Linux-only"):
        linux.inotify_init()
    with pytest.raises(linux.Unsupported, match="Linux-only"):
        linux.mount_private_tmpfs(tmp_path)  # refused before any unshare of this test process
    linux.not_dumpable()  # best effort: nothing to do, nothing raised
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    folder, fd, gap = score_process.private_scratch()
    try:
        assert gap is not None and "Linux-only (platform darwin)" in gap
        assert folder.parent == tmp_path and stat.S_IMODE(folder.stat().st_mode) == 0o700
    finally:
        os.close(fd)
        score_process.drop_scratch(folder, private=False)
    assert not folder.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux-only")
def test_not_dumpable_makes_the_process_non_dumpable() -> None:
    code = textwrap.dedent("""
        import ctypes
        from bridge.sessions import linux
        libc = ctypes.CDLL(None, use_errno=True)
        before = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
        linux.not_dumpable()
        print(before, libc.prctl(3, 0, 0, 0, 0))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        check=True,
    )
    assert out.stdout.split() == ["1", "0"], out
