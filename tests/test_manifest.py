from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import bridge.recording.manifest as manifest_mod
from bridge.fs.hashing import MODE_EXEC, MODE_FILE, MODE_LINK, tree_hash
from bridge.fs.ignore import is_temp_file
from bridge.recording.manifest import Manifest, diff, scan, stable_scan


def _tree(root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "a.py").write_text("print('a')\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o755)
    for d in ("node_modules/x", ".venv/lib", ".git", "__pycache__", "foo.egg-info", ".rgbridge", "build"):
        (root / d).mkdir(parents=True)
        (root / d / "junk.txt").write_text("junk")
    for t in (".a.py.swp", "a.py~", "4913", "a.py___jb_tmp___", ".#a.py", "a.py.tmp.1234"):
        (root / "src" / t).write_text("temp")


@pytest.mark.parametrize(
    "name,temp",
    [
        (".main.py.swp", True), ("x.swo", True), ("x.swx", True), ("main.py~", True), ("4913", True),
        ("main.py___jb_tmp___", True), ("main.py___jb_old___", True), (".#main.py", True),
        ("main.py.tmp.4242", True), ("f.crswap", True), (".~lock.doc.odt#", True),
        ("main.py", False), ("tmp.py", False), ("4913.py", False), ("x.tmp", False), ("README.md", False),
    ],
)  # fmt: skip
def test_is_temp_file(name: str, temp: bool) -> None:
    assert is_temp_file(name) is temp


def test_scan_excludes_and_modes(tmp_path: Path) -> None:
    _tree(tmp_path)
    os.symlink("/etc", tmp_path / "escape")  # a link to a directory outside: recorded, not followed
    m = scan(tmp_path)
    assert set(m) == {"src/pkg/a.py", "run.sh", "escape"}
    assert m["run.sh"].mode == MODE_EXEC
    assert m["src/pkg/a.py"].mode == MODE_FILE
    assert m["escape"].mode == MODE_LINK and m["escape"].is_symlink
    assert m.tree_hash() == tree_hash(tmp_path)


def test_tree_hash_sensitive_to_content_mode_and_path(tmp_path: Path) -> None:
    _tree(tmp_path)
    h0 = tree_hash(tmp_path)
    os.chmod(tmp_path / "run.sh", 0o644)
    h1 = tree_hash(tmp_path)
    (tmp_path / "run.sh").write_text("#!/bin/sh\necho HI\n")
    h2 = tree_hash(tmp_path)
    os.rename(tmp_path / "run.sh", tmp_path / "run2.sh")
    h3 = tree_hash(tmp_path)
    (tmp_path / "node_modules" / "x" / "junk.txt").write_text("changed")  # excluded
    assert len({h0, h1, h2, h3}) == 4
    assert tree_hash(tmp_path) == h3


def test_scan_rehashes_only_changed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(50):
        (tmp_path / f"f{i}.txt").write_text(f"content {i}")
    first = scan(tmp_path)
    time.sleep(0.06)  # let entries age past the racy-timestamp window
    first = scan(tmp_path, previous=first)
    reads: list[str] = []
    real = manifest_mod.read_entry

    def counting(path, **kw):  # type: ignore[no-untyped-def]
        reads.append(os.fspath(path))
        return real(path, **kw)

    monkeypatch.setattr(manifest_mod, "read_entry", counting)
    (tmp_path / "f7.txt").write_text("changed!")
    second = scan(tmp_path, previous=first)
    assert [Path(r).name for r in reads] == ["f7.txt"]
    assert diff(first, second)[0].path == "f7.txt"
    assert [c.kind for c in diff(first, second)] == ["modified"]


def test_racy_same_size_same_mtime_rewrite_is_detected(tmp_path: Path) -> None:
    p = tmp_path / "a.txt"
    p.write_text("AAAA")
    m1 = scan(tmp_path)  # hashed right after the write: racy
    st = p.stat()
    p.write_text("BBBB")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime, same inode
    m2 = scan(tmp_path, previous=m1)
    assert m2["a.txt"].sha256 != m1["a.txt"].sha256


def test_diff_kinds(tmp_path: Path) -> None:
    (tmp_path / "keep").write_text("k")
    (tmp_path / "gone").write_text("g")
    (tmp_path / "mod").write_text("m")
    (tmp_path / "chmod").write_text("c")
    a = scan(tmp_path)
    (tmp_path / "gone").unlink()
    (tmp_path / "mod").write_text("m2")
    os.chmod(tmp_path / "chmod", 0o755)
    (tmp_path / "new").write_text("n")
    b = scan(tmp_path, previous=a)
    assert [(c.kind, c.path) for c in diff(a, b)] == [
        ("modified", "chmod"), ("deleted", "gone"), ("modified", "mod"), ("created", "new"),
    ]  # fmt: skip


def test_oversized_files_are_left_out(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"x" * 2000)
    (tmp_path / "small.txt").write_text("s")
    m = scan(tmp_path, max_file_bytes=1000)
    assert set(m) == {"small.txt"} and m.oversized == {"big.bin": 2000}
    assert m.tree_hash() == tree_hash(tmp_path, max_file_bytes=1000)
    assert Manifest.from_dict(m.to_dict()) == m


def test_stable_scan_quiet_tree_is_stable(tmp_path: Path) -> None:
    _tree(tmp_path)
    res = stable_scan(tmp_path, quiet=0.05, max_wait=5)
    assert res.stable and res.manifest.tree_hash() == tree_hash(tmp_path)


def test_stable_scan_reports_unstable_under_constant_writes(tmp_path: Path) -> None:
    (tmp_path / "hot.txt").write_text("0")
    (tmp_path / "cold.txt").write_text("cold")
    writes = 0

    def write_after_each_read(_sha: str, _data: bytes) -> None:
        # The writer rewrites hot.txt right after every read of the scan, so each verification
        # pass finds it changed, however the machine's load schedules things. (A writer thread
        # was starved under load for a whole quiet window and the scan came back stable.)
        # The size grows each time: the change shows in the stat at any timestamp granularity.
        nonlocal writes
        writes += 1
        (tmp_path / "hot.txt").write_text("x" * (1 + writes))

    res = stable_scan(tmp_path, quiet=0.05, max_wait=0.6, on_content=write_after_each_read)
    assert not res.stable and res.passes > 1 and res.redone > 0
    assert res.seconds >= 0.6  # it gave up at max_wait, not before
    res2 = stable_scan(tmp_path, quiet=0.05, max_wait=5, previous=res.manifest)
    assert res2.stable
    assert res2.manifest["hot.txt"].sha256 == manifest_mod.sha256_bytes((tmp_path / "hot.txt").read_bytes())


def test_directory_chain_deeper_than_path_max_is_skipped_and_reported(tmp_path: Path) -> None:
    """Issue 8: a chain longer than PATH_MAX made scan (submit/quit/time-limit seal) raise OSError."""
    from bridge.recording.manifest import scan

    (tmp_path / "ok.txt").write_text("kept")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        for _ in range(100):  # 100 * 61 bytes > PATH_MAX
            os.mkdir("d" * 60, dir_fd=fd)
            nfd = os.open("d" * 60, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        os.close(os.open("deep.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    finally:
        os.close(fd)
    m = scan(tmp_path)
    assert "ok.txt" in m and not any(p.endswith("deep.txt") for p in m)
    assert m.skipped and all(k.startswith("d" * 60 + "/") for k in m.skipped)
