"""A reusable check that no copy of a golden file sits where an agent could read it.

`find_golden_copies(roots, allow=...)` lists every regular file under `roots` (symlinks not
followed) whose bytes equal a golden file of a shipped task (`tests/` or `solution/`), except
under the task folders themselves and the `allow`ed folders (recordings; a workspace into which
a test copied the oracle on purpose). Empty files are not golden: they match anything.

The `golden_leaks` fixture runs the check after the test over the test's `tmp_path` and what
appeared in the system temp folder while the test ran; a test adds folders to leave out with `golden_leaks.allow(path)` and can
check at any moment (e.g. while a score runs) with `golden_leaks.check()`.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

TASKS_DIR = Path(__file__).resolve().parent.parent / "tasks"
MAX_BYTES = 4 << 20


def golden_files(tasks_dir: Path = TASKS_DIR) -> dict[tuple[int, str], Path]:
    """(size, sha256) -> one golden file of the shipped tasks with that content."""
    out: dict[tuple[int, str], Path] = {}
    for task in sorted(p for p in tasks_dir.iterdir() if p.is_dir()):
        for part in ("tests", "solution"):
            for path in sorted((task / part).rglob("*")):
                if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
                    data = path.read_bytes()
                    if data:
                        out[(len(data), hashlib.sha256(data).hexdigest())] = path
    return out


def _files(root: Path, skip: list[Path]) -> Iterator[tuple[Path, os.stat_result]]:
    for here, dirs, files in os.walk(root, onerror=lambda _e: None):
        base = Path(here)
        dirs[:] = [d for d in dirs if not any((base / d).is_relative_to(s) for s in skip)]
        for name in files:
            path = base / name
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield path, st


def find_golden_copies(
    roots: Iterable[Path], *, allow: Iterable[Path] = (), tasks_dir: Path = TASKS_DIR
) -> list[tuple[Path, Path]]:
    """(copy, golden original) for every golden copy found under `roots`."""
    golden = golden_files(tasks_dir)
    sizes = {size for size, _ in golden}
    skip = [Path(os.path.realpath(p)) for p in (*allow, tasks_dir)]
    found: list[tuple[Path, Path]] = []
    seen: set[Path] = set()
    for root in roots:
        root = Path(os.path.realpath(root))
        if not root.is_dir():
            continue
        # a root inside a left-out folder (this test's tmp_path under pytest's) is still checked
        for path, st in _files(root, [s for s in skip if not root.is_relative_to(s)]):
            if path in seen or st.st_size not in sizes or st.st_size > MAX_BYTES:
                continue
            seen.add(path)
            try:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                continue
            original = golden.get((st.st_size, digest))
            if original is not None:
                found.append((path, original))
    return found


class GoldenLeaks:
    """What the fixture hands a test: folders to leave out, and the check itself."""

    def __init__(self, roots: list[Path], own: Path | None = None, system_tmp: Path | None = None) -> None:
        self.roots = roots
        self.allowed: list[Path] = []
        self.own = own  # this test's tmp_path: of pytest's folders only this one is checked
        # Of the system temp folder, what appears there while the test runs is checked: what
        # other runs or killed processes left before it is not this test's doing.
        self.system_tmp = system_tmp
        self.before = set(os.listdir(system_tmp)) if system_tmp is not None else set()

    def allow(self, path: Path) -> None:
        self.allowed.append(Path(path))

    def _others(self) -> list[Path]:
        """pytest's folders (other runs, other tests, `garbage-*` ones it is removing): not ours.
        This test's own folder is one of the roots, and checked."""
        return [] if self.own is None else [self.own.parent.parent]

    def check(self) -> None:
        roots = list(self.roots)
        if self.system_tmp is not None:
            try:
                roots += [self.system_tmp / name for name in set(os.listdir(self.system_tmp)) - self.before]
            except OSError:
                pass
        leaks = find_golden_copies(roots, allow=[*self.allowed, *self._others()])
        assert not leaks, "golden files copied where an agent can read them:\n" + "\n".join(
            f"  {copy} (= {original})" for copy, original in leaks
        )


@pytest.fixture()
def golden_leaks(tmp_path: Path) -> Iterator[GoldenLeaks]:
    leaks = GoldenLeaks([tmp_path], own=tmp_path, system_tmp=Path(tempfile.gettempdir()))
    yield leaks
    leaks.check()
