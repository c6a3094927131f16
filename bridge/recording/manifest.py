"""Content-hash manifests of a workspace: scan, diff, and the stat-checked stable scan used to seal.

A manifest maps relative POSIX paths to `FileEntry` values. Hashes are re-used from a previous
manifest only when (size, mtime_ns, ino, mode) are unchanged AND the entry was hashed
comfortably after its mtime (git's "racy timestamp" rule: with coarse file timestamps a
same-size rewrite within one clock tick would otherwise go unnoticed).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Literal

from bridge.fs.hashing import MODE_LINK, mode_of, sha256_bytes, tree_hash_from_entries, walk_files
from bridge.fs.ignore import EXCLUDED_DIRS
from bridge.fs.walk import open_parent

DEFAULT_MAX_FILE_BYTES = 5_000_000
# Larger than the kernel's coarse timestamp tick (1-10 ms) with a wide margin.
RACY_NS = 50_000_000

# Called with (sha256, content bytes) for every freshly read file, e.g. to store the blob.
ContentSink = Callable[[str, bytes], object]  # the return value (e.g. a blob id) is ignored


@dataclass(frozen=True, slots=True)
class FileEntry:
    sha256: str
    size: int
    mode: int  # git-style: 0o100644, 0o100755 or 0o120000
    mtime_ns: int
    ino: int
    is_symlink: bool = False
    hashed_ns: int = 0  # wall time (ns) when the content was read; 0 = unknown (trusted)

    def same_stat(self, st: os.stat_result) -> bool:
        return (
            self.size == st.st_size
            and self.mtime_ns == st.st_mtime_ns
            and self.ino == st.st_ino
            and self.mode == mode_of(st)
        )

    @property
    def racy(self) -> bool:
        return self.hashed_ns != 0 and self.mtime_ns + RACY_NS >= self.hashed_ns

    def same_content(self, other: FileEntry | None) -> bool:
        return other is not None and self.sha256 == other.sha256 and self.mode == other.mode


@dataclass
class Manifest(Mapping[str, FileEntry]):
    """path -> FileEntry, plus the files left out for exceeding the size cap (path -> size)."""

    files: dict[str, FileEntry] = field(default_factory=dict)
    oversized: dict[str, int] = field(default_factory=dict)
    # Subtrees left out because they could not be read (too deep/long, unreadable): dir -> reason.
    skipped: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, key: str) -> FileEntry:
        return self.files[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)

    def tree_hash(self) -> str:
        """Equals `hashing.tree_hash(root, max_file_bytes=cap)` of the scanned tree."""
        return tree_hash_from_entries((p, e.mode, e.sha256) for p, e in self.files.items())

    def copy(self) -> Manifest:
        return Manifest(dict(self.files), dict(self.oversized))

    def to_dict(self) -> dict[str, object]:
        return {
            "files": {p: asdict(e) for p, e in sorted(self.files.items())},
            "oversized": dict(sorted(self.oversized.items())),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Manifest:
        raw_files = data.get("files", {})
        raw_oversized = data.get("oversized", {})
        if not isinstance(raw_files, dict) or not isinstance(raw_oversized, dict):
            raise ValueError("manifest: 'files' and 'oversized' must be objects")
        files = {p: FileEntry(**e) for p, e in raw_files.items()}
        return cls(files, dict(raw_oversized))


@dataclass(frozen=True, slots=True)
class Change:
    kind: Literal["created", "modified", "deleted"]
    path: str
    old: FileEntry | None = None
    new: FileEntry | None = None


@dataclass(frozen=True, slots=True)
class Oversized:
    size: int


@dataclass(frozen=True, slots=True)
class StableScan:
    manifest: Manifest
    stable: bool
    passes: int
    seconds: float
    redone: int  # files re-read because they changed during or between passes


def read_entry(
    path: str | os.PathLike[str],
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    retries: int = 3,
    root: str | os.PathLike[str] | None = None,
) -> tuple[FileEntry, bytes, bool] | Oversized | None:
    """Read one file with a stat before and after; retry while it changes under us.

    Returns (entry, content, stable), `Oversized`, or None when the path is gone or is not a
    regular file/symlink. Symlinks are read by target text and never followed.
    """
    if root is not None:  # `path` is relative to `root`: no symlink component is ever followed
        try:
            with open_parent(root, os.fspath(path)) as (dir_fd, name):
                return _read_entry_at(dir_fd, name, max_file_bytes=max_file_bytes, retries=retries)
        except (OSError, ValueError):  # a component is a symlink / not a directory / gone
            return None
    return _read_entry_at(None, os.fspath(path), max_file_bytes=max_file_bytes, retries=retries)


def _read_entry_at(
    dir_fd: int | None, p: str, *, max_file_bytes: int, retries: int
) -> tuple[FileEntry, bytes, bool] | Oversized | None:
    last: tuple[FileEntry, bytes, bool] | None = None
    for _ in range(max(1, retries)):
        try:
            st1 = os.stat(p, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st1.st_mode):
                data = os.fsencode(os.readlink(p, dir_fd=dir_fd))
                is_link = True
            elif stat.S_ISREG(st1.st_mode):
                if st1.st_size > max_file_bytes:
                    return Oversized(st1.st_size)
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
                try:
                    chunks = []
                    while chunk := os.read(fd, 1 << 20):
                        chunks.append(chunk)
                        if sum(map(len, chunks)) > max_file_bytes:
                            break
                finally:
                    os.close(fd)
                data = b"".join(chunks)
                if len(data) > max_file_bytes:
                    return Oversized(len(data))
                is_link = False
            else:
                return None
            hashed_ns = time.time_ns()
            st2 = os.stat(p, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:  # ELOOP (replaced by a link mid-open), EACCES...: treat as absent for now
            return None
        stable = (st1.st_size, st1.st_mtime_ns, st1.st_ino, st1.st_mode, st1.st_ctime_ns) == (
            st2.st_size,
            st2.st_mtime_ns,
            st2.st_ino,
            st2.st_mode,
            st2.st_ctime_ns,
        ) and (is_link or len(data) == st2.st_size)
        entry = FileEntry(
            sha256=sha256_bytes(data),
            size=st2.st_size if not is_link else len(data),
            mode=MODE_LINK if is_link else mode_of(st2),
            mtime_ns=st2.st_mtime_ns,
            ino=st2.st_ino,
            is_symlink=is_link,
            hashed_ns=hashed_ns,
        )
        last = (entry, data, stable)
        if stable:
            return last
    return last


def scan(
    root: str | os.PathLike[str],
    *,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    previous: Manifest | None = None,
    exclude: frozenset[str] | set[str] = EXCLUDED_DIRS,
    on_content: ContentSink | None = None,
) -> Manifest:
    """Manifest of the tree under root. Only files whose stat changed vs `previous` are read.

    A missing root gives an empty manifest.
    """
    files: dict[str, FileEntry] = {}
    oversized: dict[str, int] = {}
    prev = previous.files if previous is not None else {}
    skipped: dict[str, str] = {}
    for rel, dirent in walk_files(root, exclude, skipped):
        try:
            st = dirent.stat(follow_symlinks=False)
        except OSError:
            continue
        old = prev.get(rel)
        if old is not None and old.same_stat(st) and not old.racy:
            files[rel] = old
            continue
        if stat.S_ISREG(st.st_mode) and st.st_size > max_file_bytes:
            oversized[rel] = st.st_size
            continue
        got = read_entry(rel, root=root, max_file_bytes=max_file_bytes)
        if got is None:
            continue
        if isinstance(got, Oversized):
            oversized[rel] = got.size
            continue
        entry, data, _stable = got
        if on_content is not None:
            on_content(entry.sha256, data)
        files[rel] = entry
    return Manifest(files, oversized, skipped)


def diff(old: Mapping[str, FileEntry], new: Mapping[str, FileEntry]) -> list[Change]:
    """Changes from old to new, sorted by path; a mode-only change counts as modified."""
    out: list[Change] = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a is None and b is not None:
            out.append(Change("created", path, None, b))
        elif b is None and a is not None:
            out.append(Change("deleted", path, a, None))
        elif a is not None and b is not None and not a.same_content(b):
            out.append(Change("modified", path, a, b))
    return out


def _unsettled(root: str, m: Manifest, exclude: frozenset[str] | set[str], max_file_bytes: int) -> int:
    """Count paths whose on-disk state differs from `m` (stat for all, content for racy entries)."""
    seen: set[str] = set()
    bad = 0
    for rel, dirent in walk_files(root, exclude):
        try:
            st = dirent.stat(follow_symlinks=False)
        except OSError:
            bad += 1
            continue
        if rel in m.oversized:
            seen.add(rel)
            if not (stat.S_ISREG(st.st_mode) and st.st_size > max_file_bytes):
                bad += 1
            continue
        e = m.files.get(rel)
        if e is None or not e.same_stat(st):
            bad += 1
            continue
        seen.add(rel)
        if e.racy:
            got = read_entry(rel, root=root, max_file_bytes=max_file_bytes)
            if not isinstance(got, tuple) or got[0].sha256 != e.sha256:
                bad += 1
    missing = (len(m.files) + len(m.oversized)) - len(seen)
    return bad + max(0, missing)


def stable_scan(
    root: str | os.PathLike[str],
    *,
    quiet: float = 0.0,
    max_wait: float = 30.0,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    previous: Manifest | None = None,
    exclude: frozenset[str] | set[str] = EXCLUDED_DIRS,
    on_content: ContentSink | None = None,
) -> StableScan:
    """The seal protocol (anchors §5.4 step 3).

    Hash every file with a stat before and after (retrying files that change mid-read), then
    wait `quiet` seconds and verify the whole tree again by stat (and by content for entries
    with racy timestamps). Files that changed are re-read and the verification repeated until a
    pass finds nothing, or `max_wait` is exhausted (`stable=False`).
    """
    root_s = os.fspath(root)
    t0 = time.monotonic()
    deadline = t0 + max_wait
    m = scan(root_s, max_file_bytes=max_file_bytes, previous=previous, exclude=exclude, on_content=on_content)
    passes, redone = 1, 0
    stable = False
    while True:
        if quiet > 0:
            time.sleep(max(0.0, min(quiet, deadline - time.monotonic())))
        bad = _unsettled(root_s, m, exclude, max_file_bytes)
        if bad == 0:
            stable = True
            break
        if time.monotonic() >= deadline:
            break
        redone += bad
        # Racy entries are re-read by scan() itself; their fresh hashed_ns makes them trusted next time.
        m = scan(root_s, max_file_bytes=max_file_bytes, previous=m, exclude=exclude, on_content=on_content)
        passes += 1
    return StableScan(m, stable, passes, time.monotonic() - t0, redone)
