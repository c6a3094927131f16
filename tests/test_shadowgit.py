from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bridge.errors import RecordingError
from bridge.fs.hashing import tree_hash, walk_files
from bridge.recording.manifest import scan
from bridge.recording.store import ShadowStore, StoreMismatch


def _files(root: Path) -> dict[str, tuple[bytes, bool, str | None]]:
    """path -> (bytes, executable, link target) for every recorded file."""
    out = {}
    for rel, entry in walk_files(root):
        p = Path(entry.path)
        if p.is_symlink():
            out[rel] = (b"", False, os.readlink(p))
        else:
            out[rel] = (p.read_bytes(), bool(p.stat().st_mode & 0o100), None)
    return out


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    (w / "app" / "deep").mkdir(parents=True)
    (w / "app" / "main.py").write_text("print('hi')\n")
    (w / "app" / "deep" / "data.bin").write_bytes(bytes(range(256)) * 10)
    (w / "start.sh").write_text("#!/bin/sh\nexec python app/main.py\n")
    os.chmod(w / "start.sh", 0o755)
    (w / "with space é.txt").write_text("unicode name")
    os.symlink("app/main.py", w / "link.py")
    (w / "empty").write_bytes(b"")
    return w


def test_commit_checkout_roundtrip(ws: Path, tmp_path: Path) -> None:
    store = ShadowStore(tmp_path / "store.git", ws)
    m = scan(ws, on_content=store.put_blob)
    c = store.commit(m, "first", ts=1_700_000_000)
    out = tmp_path / "out"
    store.checkout_to(c, out)
    assert _files(out) == _files(ws)
    assert store.tree_hash_of(c) == m.tree_hash() == tree_hash(ws) == tree_hash(out)
    # unchanged tree: no new commit
    assert store.commit(scan(ws, previous=m), "again") == c
    (ws / "app" / "main.py").write_text("print('changed')\n")
    m2 = scan(ws, previous=m, on_content=store.put_blob)
    c2 = store.commit(m2, "second", ts=1_700_000_100)
    log = store.log()
    assert [e.commit for e in log] == [c, c2]
    assert log[0].time == 1_700_000_000 and log[0].message.startswith("first")
    assert store.tag(c2, "refs/rgbridge/submission") == "refs/rgbridge/submission"
    assert store.resolve("refs/rgbridge/submission") == c2
    fsck = subprocess.run(["git", "--git-dir", str(store.git_dir), "fsck", "--strict"], capture_output=True)
    assert fsck.returncode == 0, fsck.stderr


def test_commit_reads_disk_when_content_unknown_and_detects_changes(ws: Path, tmp_path: Path) -> None:
    store = ShadowStore(tmp_path / "s.git", ws)
    m = scan(ws)  # no blob sink: the store reads and verifies files itself
    c = store.commit(m, "from disk")
    assert store.tree_hash_of(c) == m.tree_hash()
    (ws / "app" / "main.py").write_text("new content after the scan")
    m_stale = scan(ws)
    (ws / "app" / "main.py").write_text("and changed again")
    with pytest.raises(StoreMismatch) as err:
        store.commit(m_stale, "stale")
    assert err.value.paths == ["app/main.py"]


def test_store_reopen_keeps_history_and_blob_map(ws: Path, tmp_path: Path) -> None:
    store = ShadowStore(tmp_path / "s.git", ws)
    m = scan(ws, on_content=store.put_blob)
    c = store.commit(m, "one")
    again = ShadowStore(tmp_path / "s.git", ws)
    assert again.head() == c
    assert all(again.has_content(e.sha256) for e in m.values())


def test_oversized_files_left_out_and_listed(ws: Path, tmp_path: Path) -> None:
    (ws / "huge.bin").write_bytes(b"z" * 5000)
    store = ShadowStore(tmp_path / "s.git", ws, max_file_bytes=4000)
    m = scan(ws, max_file_bytes=10_000)
    res = store.commit_manifest(m, "big")
    assert res.left_out == ["huge.bin"]
    assert store.left_out(res.commit) == ["huge.bin"]
    assert "huge.bin" not in {e.path for e in store.ls_tree(res.commit)}


def test_store_inside_workspace_rejected(ws: Path) -> None:
    with pytest.raises(RecordingError):
        ShadowStore(ws / ".rgbridge" / "store", ws)


def test_checkout_requires_empty_dir(ws: Path, tmp_path: Path) -> None:
    store = ShadowStore(tmp_path / "s.git", ws)
    c = store.commit(scan(ws), "x")
    out = tmp_path / "o"
    out.mkdir()
    (out / "pre-existing").write_text("x")
    with pytest.raises(RecordingError):
        store.checkout_to(c, out)


def test_symlink_out_of_tree_is_materialised_as_link_not_followed(tmp_path: Path) -> None:
    ws = tmp_path / "w"
    ws.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    os.symlink(str(victim), ws / "evil")
    (ws / "ok.txt").write_text("fine")
    store = ShadowStore(tmp_path / "s.git", ws)
    c = store.commit(scan(ws), "links")
    out = tmp_path / "out"
    store.checkout_to(c, out)
    assert (out / "evil").is_symlink() and os.readlink(out / "evil") == str(victim)
    assert list(victim.iterdir()) == []


def test_workspace_git_config_filters_hooks_and_gitignore_have_no_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = tmp_path / "pwned"
    git_env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(ws)], check=True, env=git_env)
    with open(ws / ".git" / "config", "a") as fh:
        fh.write(f'[filter "x"]\n\tclean = touch {marker}\n\tsmudge = touch {marker}\n\trequired = false\n')
        fh.write(f"[core]\n\tfsmonitor = touch {marker}\n")
    for hook in ("pre-commit", "post-commit", "post-checkout", "reference-transaction", "post-index-change"):
        h = ws / ".git" / "hooks" / hook
        h.write_text(f"#!/bin/sh\ntouch {marker}\n")
        os.chmod(h, 0o755)
    (ws / ".gitattributes").write_text("* filter=x\n")
    (ws / ".gitignore").write_text("secret.py\n")
    (ws / "secret.py").write_text("SECRET = 1\n")
    (ws / "main.py").write_text("import secret\n")
    # a hostile global config and inherited git variables must not leak in either
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f'[filter "x"]\n\tclean = touch {marker}\n[core]\n\thooksPath = {ws}/.git/hooks\n')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_DIR", str(ws / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(ws / ".git" / "index"))

    store = ShadowStore(tmp_path / "store.git", ws)
    m = scan(ws, on_content=store.put_blob)
    c = store.commit(m, "snap")
    store.tag(c, "refs/rgbridge/submission")
    store.log()
    out = tmp_path / "out"
    store.checkout_to(c, out)
    store.tree_hash_of(c)
    assert not marker.exists()
    paths = {e.path for e in store.ls_tree(c)}
    assert {"secret.py", "main.py", ".gitignore", ".gitattributes"} <= paths
    assert not any(p.startswith(".git/") for p in paths)
    assert (out / "secret.py").read_text() == "SECRET = 1\n"
    assert not (ws / ".git" / "index").exists()  # the workspace's own index was never touched

    # control: the trap is real; an ordinary `git add` in the workspace does fire the filter
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_INDEX_FILE")
    subprocess.run(["git", "-C", str(ws), "add", "-A"], env={**git_env, "HOME": str(home)}, capture_output=True)
    assert marker.exists()


def test_new_store_holds_none_of_gits_template_files(ws: Path, tmp_path: Path) -> None:
    """No sample hooks, description or info/exclude: a recording's store holds what the bridge writes."""
    store = ShadowStore(tmp_path / "store.git", ws)
    store.commit(scan(ws, on_content=store.put_blob), "snap")
    top = {p.name for p in store.git_dir.iterdir()}
    assert not top & {"hooks", "description", "info"}, top
