"""Read a recording without writing to it (docs/recording-format.md): session.json through its
version-1 model (bridge/recording/format.py), events.jsonl parsed once into typed events
(bridge/recording/event_model.py), and the shadow git store through `StoreReader`, a pure-Python
reader of git's loose objects (the recorder writes loose objects only) that checks every object's
SHA-1 and every blob's SHA-256 as it reads. No git process ever runs on a recording's store here
(a crafted store config could make git run commands).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import threading
import zlib
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from bridge.errors import RecordingError
from bridge.fs.hashing import MODE_EXEC, MODE_FILE, MODE_LINK, sha256_bytes
from bridge.recording.clock import parse_iso
from bridge.recording.event_model import (
    Event,
    EventBase,
    EventShapeError,
    FileDeleted,
    FileEvent,
    FileMoved,
    parse_event,
)
from bridge.recording.events import ReadStats, read_events
from bridge.recording.format import SessionMeta, check_format_version
from bridge.recording.gitsafe import HARDENING_ARGS, check_store_layout, isolated_git_env

#: the event classes of file changes (file_created/file_modified, file_deleted, file_moved)
FILE_EVENT_CLASSES = (FileEvent, FileDeleted, FileMoved)
AnyFileEvent = FileEvent | FileDeleted | FileMoved
E = TypeVar("E", bound=EventBase)
INDEX_NAME = "index.json"
_OID = re.compile(r"^[0-9a-f]{40}$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def load_meta(rec_dir: Path) -> SessionMeta:
    path = Path(rec_dir) / "session.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordingError(f"{rec_dir}: not a recording (no session.json)") from None
    except (OSError, ValueError) as exc:
        raise RecordingError(f"{path}: unreadable session.json: {exc}") from None
    if not isinstance(data, dict):
        raise RecordingError(f"{path}: session.json is not an object")
    check_format_version(data.get("format_version"), str(path))
    try:
        return SessionMeta.model_validate(data)
    except ValueError as exc:
        raise RecordingError(f"{path}: invalid session.json: {str(exc).splitlines()[0]}") from None


# ----------------------------------------------------------------------------- the git store


class StoreReader:
    """Read-only access to a shadow store: refs, commits, trees and blobs.

    Loose objects are read in Python (zlib) and their SHA-1 checked. Packed objects (only if
    somebody ran `git gc` on the store) are read through `git cat-file` with an isolated
    environment; a store with `objects/info/alternates` is refused (it would read outside it).
    """

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = Path(git_dir)
        if not (self.git_dir / "objects").is_dir():
            raise RecordingError(f"{self.git_dir}: shadow store missing (no objects/)")
        check_store_layout(self.git_dir)
        self._trees: dict[str, list[tuple[int, str, str]]] = {}
        self._lock = threading.Lock()
        self._blobmap: dict[str, str] | None = None
        self._sha_by_oid: dict[str, str] | None = None

    # ---- refs
    def refs(self) -> dict[str, str]:
        out: dict[str, str] = {}
        packed = self.git_dir / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8", errors="replace").splitlines():
                parts = line.split()
                if len(parts) == 2 and _OID.match(parts[0]) and parts[1].startswith("refs/"):
                    out[parts[1]] = parts[0]
        refs_dir = self.git_dir / "refs"
        if refs_dir.is_dir():
            for path in sorted(refs_dir.rglob("*")):
                if path.is_file() and not path.is_symlink():
                    name = path.relative_to(self.git_dir).as_posix()
                    out[name] = path.read_text(encoding="utf-8", errors="replace").strip()
        return dict(sorted(out.items()))

    def ref(self, name: str) -> str | None:
        return self.refs().get(name)

    # ---- objects
    def _loose_path(self, oid: str) -> Path:
        return self.git_dir / "objects" / oid[:2] / oid[2:]

    def read_object(self, oid: str) -> tuple[str, bytes]:
        if not _OID.match(oid or ""):
            raise RecordingError(f"invalid object id {oid!r}")
        path = self._loose_path(oid)
        try:
            raw = zlib.decompress(path.read_bytes())
        except FileNotFoundError:
            return self._read_packed(oid)
        except (OSError, zlib.error) as exc:
            raise RecordingError(f"store object {oid} unreadable: {exc}") from None
        if hashlib.sha1(raw, usedforsecurity=False).hexdigest() != oid:
            raise RecordingError(f"store object {oid} is corrupt (content does not match its id)")
        nul = raw.find(b"\0")
        header = raw[:nul].decode("ascii", "replace").split()
        if nul < 0 or len(header) != 2 or int(header[1]) != len(raw) - nul - 1:
            raise RecordingError(f"store object {oid} has a malformed header")
        return header[0], raw[nul + 1 :]

    def _read_packed(self, oid: str) -> tuple[str, bytes]:
        if not any((self.git_dir / "objects" / "pack").glob("*.pack")):
            raise RecordingError(f"store object {oid} is missing")
        check_store_layout(self.git_dir)  # again: the store may have changed since it was opened
        env = isolated_git_env(self.git_dir)
        argv = ["git", *HARDENING_ARGS, "cat-file", "--batch"]
        try:
            proc = subprocess.run(
                argv,
                input=oid.encode() + b"\n",
                env=env,
                cwd=self.git_dir,
                capture_output=True,
                check=False,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RecordingError(f"git cat-file failed: {exc}") from None
        head, _, rest = proc.stdout.partition(b"\n")
        parts = head.split()
        if len(parts) != 3:
            raise RecordingError(f"store object {oid} is missing")
        size = int(parts[2])
        data = rest[:size]
        raw = b"%s %d\0" % (parts[1], size) + data
        if hashlib.sha1(raw, usedforsecurity=False).hexdigest() != oid:
            raise RecordingError(f"store object {oid} is corrupt (content does not match its id)")
        return parts[1].decode(), data

    def read_blob(self, oid: str) -> bytes:
        typ, data = self.read_object(oid)
        if typ != "blob":
            raise RecordingError(f"store object {oid} is a {typ}, expected a blob")
        return data

    def commit_fields(self, oid: str) -> dict[str, Any]:
        typ, data = self.read_object(oid)
        if typ != "commit":
            raise RecordingError(f"store object {oid} is a {typ}, expected a commit")
        text = data.decode("utf-8", "surrogateescape")
        head, _, message = text.partition("\n\n")
        fields: dict[str, Any] = {"parents": [], "message": message}
        for line in head.splitlines():
            key, _, value = line.partition(" ")
            if key == "tree":
                fields["tree"] = value.strip()
            elif key == "parent":
                fields["parents"].append(value.strip())
            elif key == "committer":
                try:
                    fields["time"] = int(value.rsplit(" ", 2)[-2])
                except (ValueError, IndexError):
                    fields["time"] = 0
        if "tree" not in fields:
            raise RecordingError(f"store commit {oid} has no tree")
        trailers = re.findall(r"^Rgbridge-Tree-Hash: ([0-9a-f]{64})$", message, re.M)
        fields["tree_hash_trailer"] = trailers[-1] if trailers else None
        fields["left_out"] = re.findall(r"^Rgbridge-Left-Out: (.+)$", message, re.M)
        return fields

    def _tree(self, oid: str) -> list[tuple[int, str, str]]:
        with self._lock:
            hit = self._trees.get(oid)
        if hit is not None:
            return hit
        typ, data = self.read_object(oid)
        if typ != "tree":
            raise RecordingError(f"store object {oid} is a {typ}, expected a tree")
        entries: list[tuple[int, str, str]] = []
        i = 0
        while i < len(data):
            sp = data.index(b" ", i)
            nul = data.index(b"\0", sp)
            mode = int(data[i:sp], 8)
            name = data[sp + 1 : nul].decode("utf-8", "surrogateescape")
            child = data[nul + 1 : nul + 21].hex()
            if len(child) != 40 or name in ("", ".", "..") or "/" in name:
                raise RecordingError(f"store tree {oid} has a malformed entry")
            entries.append((mode, name, child))
            i = nul + 21
        with self._lock:
            self._trees[oid] = entries
        return entries

    def tree_files(self, commit: str) -> dict[str, tuple[int, str]]:
        """path -> (git mode, blob oid) of a commit's whole tree."""
        out: dict[str, tuple[int, str]] = {}
        stack = [("", self.commit_fields(commit)["tree"])]
        while stack:
            prefix, tree = stack.pop()
            for mode, name, child in self._tree(tree):
                if mode == 0o40000:
                    stack.append((f"{prefix}{name}/", child))
                elif mode in (MODE_FILE, MODE_EXEC, MODE_LINK):
                    out[prefix + name] = (mode, child)
                else:  # submodules and other kinds never occur in recorded trees
                    raise RecordingError(f"store tree {tree} has an unsupported entry mode {mode:o}")
        return out

    # ---- sha256 <-> oid (rgbridge/blobmap, written by ShadowStore.put_blob)
    def _load_blobmap(self) -> None:
        by_sha: dict[str, str] = {}
        by_oid: dict[str, str] = {}
        path = self.git_dir / "rgbridge" / "blobmap"
        if path.is_file():
            for line in path.read_text(encoding="ascii", errors="replace").splitlines():
                parts = line.split()
                if len(parts) == 2 and SHA256_HEX.match(parts[0]) and _OID.match(parts[1]):
                    by_sha.setdefault(parts[0], parts[1])
                    by_oid.setdefault(parts[1], parts[0])
        self._blobmap, self._sha_by_oid = by_sha, by_oid

    def oid_for_sha256(self, sha256: str) -> str | None:
        if self._blobmap is None:
            self._load_blobmap()
        assert self._blobmap is not None
        oid = self._blobmap.get(sha256)
        if oid is None:
            return None
        return oid if self._loose_path(oid).exists() or self._has_packs() else None

    def sha256_for_oid(self, oid: str) -> str:
        if self._sha_by_oid is None:
            self._load_blobmap()
        assert self._sha_by_oid is not None
        known = self._sha_by_oid.get(oid)
        return known if known is not None else sha256_bytes(self.read_blob(oid))

    def _has_packs(self) -> bool:
        return any((self.git_dir / "objects" / "pack").glob("*.pack"))


# ----------------------------------------------------------------------------- recordings


@dataclass
class Recording:
    """A recording opened for reading: its events parsed once into the typed event model."""

    dir: Path
    meta: SessionMeta
    events: list[Event]
    bad_lines: int
    store: StoreReader

    @property
    def started(self) -> datetime:
        return parse_iso(self.meta.created_at)

    def by_seq(self, seq: int) -> Event | None:
        i = bisect_left(self.events, seq, key=lambda e: e.seq)
        return self.events[i] if i < len(self.events) and self.events[i].seq == seq else None

    def last_of(self, kind: type[E]) -> E | None:
        for ev in reversed(self.events):
            if isinstance(ev, kind):
                return ev
        return None

    def of_type(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]


def open_recording(rec_dir: Path | str) -> Recording:
    rec_dir = Path(rec_dir)
    if not rec_dir.is_dir():
        raise RecordingError(f"{rec_dir}: recording folder does not exist")
    meta = load_meta(rec_dir)
    events_path = rec_dir / "events.jsonl"
    if not events_path.is_file():
        raise RecordingError(f"{rec_dir}: recording has no events.jsonl")
    stats = ReadStats()
    events: list[Event] = []
    for record in read_events(events_path, stats=stats):
        if not isinstance(record.get("seq"), int):
            continue
        try:
            events.append(parse_event(record))  # every field a reader uses has its type's shape
        except EventShapeError as exc:
            raise RecordingError(f"{rec_dir}: events.jsonl: event {record['seq']} is malformed ({exc})") from None
    events.sort(key=lambda e: e.seq)  # written in order; sorting makes bisect safe on odd files
    return Recording(rec_dir, meta, events, stats.bad_lines, StoreReader(rec_dir / "store"))


def iter_recordings(folder: Path) -> Iterator[Path]:
    """Recording folders directly under `folder` (those with a session.json)."""
    for child in sorted(Path(folder).iterdir()):
        if child.is_dir() and (child / "session.json").is_file():
            yield child


def file_events(rec: Recording) -> Iterable[AnyFileEvent]:
    return (e for e in rec.events if isinstance(e, FILE_EVENT_CLASSES))
