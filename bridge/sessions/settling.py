"""Debouncing the recorder's raw events: each path settles (no event for `settle` seconds) before
it is read, hashed and logged.

- A path is read with a stat before and after; the exact bytes go into the store as a git blob,
  and an event is logged only when the content hash (or mode) differs from the record
  (bridge/sessions/recorded.py), so duplicate and simulated events are harmless.
- `closed(p)` and `moved(dest=p)` mean "p has new content"; a 0-byte read after a plain modify is
  a suspected truncate-then-write and is re-read after another settle delay.
- A created or moved-in directory is walked once it settles; a move whose destination holds the
  source's content is logged as `file_moved`.

Callers hold the recorder's lock.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from bridge.fs.hashing import walk_files
from bridge.fs.ignore import is_excluded_dir, is_recorded_rel
from bridge.recording.manifest import Oversized, read_entry
from bridge.recording.store import ShadowStore
from bridge.sessions.recorded import RecordedFiles


@dataclass(slots=True)
class Pending:
    last: float
    kind: str
    suspect: int = 0
    unstable: int = 0


def workspace_rel(root: str, path: str) -> str | None:
    """`path` relative to the workspace `root`, POSIX-style; None when it is not beneath it."""
    if not path or not path.startswith(root + os.sep):
        return None
    return path[len(root) + 1 :].replace(os.sep, "/")


class Settler:
    """Paths waiting to settle, directories waiting to be walked, and moves waiting to be matched."""

    def __init__(
        self,
        root: str,
        *,
        exclude: frozenset[str],
        settle: float,
        max_file_bytes: int,
        store: ShadowStore,
        recorded: RecordedFiles,
    ) -> None:
        self._root_s = root
        self.exclude = exclude
        self.settle = settle
        self.max_file_bytes = max_file_bytes
        self.store = store
        self.recorded = recorded
        self.pending: dict[str, Pending] = {}
        self.dir_scans: dict[str, float] = {}
        self.moves: dict[str, str] = {}  # dest rel -> src rel

    def busy(self) -> bool:
        return bool(self.pending or self.dir_scans)

    def _recorded_dir(self, rel: str) -> bool:
        return not any(is_excluded_dir(p, self.exclude) for p in rel.split("/"))

    def _recorded_file(self, rel: str | None) -> bool:
        if not rel:
            return False
        return is_recorded_rel(rel, self.exclude)

    def ingest(self, kind: str, srel: str | None, drel: str | None, is_dir: bool, mono: float) -> None:
        """One raw event, its paths already relative to the workspace (None: outside it)."""
        if is_dir:
            if kind in ("created",) and srel and self._recorded_dir(srel):
                self.dir_scans[srel] = mono
            elif kind == "deleted" and srel:
                self._dir_gone(srel, mono)
            elif kind == "moved":
                if srel:
                    for child in self.recorded.under(srel):
                        if drel and self._recorded_dir(drel):
                            self.moves[drel + child[len(srel) :]] = child
                    self._dir_gone(srel, mono)
                if drel and self._recorded_dir(drel):
                    self.dir_scans[drel] = mono
            return
        if kind == "moved":
            self._touch(srel, mono, "moved_from")
            self._touch(drel, mono, "moved_to")
            if drel and srel and self._recorded_file(srel) and self._recorded_file(drel):
                self.moves[drel] = srel
        else:
            self._touch(srel, mono, kind)

    def _dir_gone(self, rel_dir: str, mono: float) -> None:
        for p in self.recorded.under(rel_dir):
            self._touch(p, mono, "deleted")
        prefix = rel_dir + "/"
        for p in [p for p in self.recorded.oversized if p.startswith(prefix)]:
            self._touch(p, mono, "deleted")

    def _touch(self, rel: str | None, mono: float, kind: str) -> None:
        if not self._recorded_file(rel):
            return
        assert rel is not None
        pend = self.pending.get(rel)
        if pend is None:
            self.pending[rel] = Pending(mono, kind)
        else:
            pend.last = max(pend.last, mono)
            pend.kind = kind

    def process_due(self, *, force: bool = False) -> None:
        """Walk settled directories and settle due paths (`force`: everything, now)."""
        now = time.monotonic()
        for rel_dir, t in list(self.dir_scans.items()):
            if force or now - t >= self.settle:
                del self.dir_scans[rel_dir]
                self._scan_dir_into_pending(rel_dir, t)
        due = [p for p, pend in self.pending.items() if force or now - pend.last >= self.settle]
        due.sort(key=lambda p: (p not in self.moves, p))  # move destinations first
        for rel in due:
            pend = self.pending.pop(rel, None)
            if pend is not None:
                self._settle_path(rel, pend, force=force)

    def _scan_dir_into_pending(self, rel_dir: str, t: float) -> None:
        top = os.path.join(self._root_s, *rel_dir.split("/"))
        if os.path.islink(top):  # a directory swapped for a link: the link is the entry, never its target
            self.pending.setdefault(rel_dir, Pending(t - self.settle, "created"))
            return
        for sub, _entry in walk_files(self._root_s, self.exclude, under=rel_dir):
            rel = f"{rel_dir}/{sub}"
            if rel not in self.pending:
                self.pending[rel] = Pending(t - self.settle, "created")

    def _settle_path(self, rel: str, pend: Pending, *, force: bool) -> None:
        now = time.monotonic()
        got = read_entry(rel, root=self._root_s, max_file_bytes=self.max_file_bytes)
        files, oversized = self.recorded.files, self.recorded.oversized
        old = files.get(rel)
        if got is None:
            self.moves.pop(rel, None)
            if old is not None:
                del files[rel]
                self.recorded.log_file("file_deleted", rel, None)
            if oversized.pop(rel, None) is not None and old is None:
                self.recorded.log_file("file_deleted", rel, None)
            return
        if isinstance(got, Oversized):
            self.moves.pop(rel, None)
            if old is not None:
                del files[rel]
            if oversized.get(rel) != got.size:
                kind = "file_created" if old is None and rel not in oversized else "file_modified"
                oversized[rel] = got.size
                self.recorded.log_file(kind, rel, None, oversized=True, size=got.size)
            return
        entry, data, stable = got
        if not force:
            if not stable and pend.unstable < 5:
                pend.unstable += 1
                pend.last = now
                self.pending[rel] = pend
                return
            if entry.size == 0 and pend.kind == "modified" and old is not None and old.size > 0 and pend.suspect < 2:
                pend.suspect += 1  # suspected truncate-then-write: look again after another settle
                pend.last = now
                self.pending[rel] = pend
                return
        self.store.put_blob(entry.sha256, data)
        was_oversized = oversized.pop(rel, None) is not None
        src = self.moves.pop(rel, None)
        if old is not None and old.same_content(entry):
            files[rel] = entry  # stat refresh only
            return
        if (
            src is not None
            and old is None
            and src in files
            and files[src].same_content(entry)
            and not os.path.lexists(os.path.join(self._root_s, *src.split("/")))
        ):
            del files[src]
            self.pending.pop(src, None)
            files[rel] = entry
            self.recorded.changed.add(src)
            self.recorded.log_file("file_moved", src, entry, dest=rel)
            return
        files[rel] = entry
        self.recorded.log_file("file_created" if old is None and not was_oversized else "file_modified", rel, entry)
