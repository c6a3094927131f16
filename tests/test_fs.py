"""bridge/fs: lookups beneath a root never follow a symlink component."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from bridge.fs.walk import open_parent, split_rel
from bridge.recording.manifest import read_entry


def test_split_rel_refuses_unclean_paths() -> None:
    assert split_rel("a/b") == ["a", "b"]
    for bad in ("", "/etc", "a/../b", "a//b", "./a", "a/"):
        with pytest.raises(ValueError):
            split_rel(bad)


def test_open_parent_refuses_symlinked_directory(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("s")
    os.symlink(outside, root / "link")
    with open_parent(root, "d/x") as (fd, name):
        assert name == "x" and fd >= 0
    with pytest.raises(OSError) as exc:
        with open_parent(root, "link/secret"):
            pass
    assert exc.value.errno in (errno.ELOOP, errno.ENOTDIR)
    assert read_entry("link/secret", root=root) is None
    got = read_entry("link", root=root)  # the link itself is an entry: its target text
    assert isinstance(got, tuple) and got[0].is_symlink
    assert got[1] == os.fsencode(str(outside))
