"""The recorder's log of record: the workspace files as last logged, the file events that change
them, and reconciliation of that record against a fresh scan.

File events: `file_created|file_modified|file_deleted` with `path`, and `sha256`, `size`, `mode`
(git octal string, e.g. "100755") where applicable; `file_moved` with `path` (source), `dest`.
Oversized files are logged with `"oversized": true` and no sha256, and are not committed. Because inotify can drop
events, reconciliation logs a `"synthetic": true` event for each difference it finds, followed
by a `reconcile` record with counts. Callers hold the recorder's lock.
"""

from __future__ import annotations

from typing import Any

from bridge.recording.events import EventLog
from bridge.recording.manifest import FileEntry, Manifest, diff


class RecordedFiles:
    """What the log of record says the workspace holds, and the one writer of file events."""

    def __init__(self, log: EventLog) -> None:
        self.log = log
        self.files: dict[str, FileEntry] = {}
        self.oversized: dict[str, int] = {}  # path -> size of a file left out for its size
        self.changed: set[str] = set()  # distinct paths with at least one logged change
        self.events_logged = 0
        #: a change was logged since the last commit (bridge/sessions/checkpoints.py clears it)
        self.dirty = False

    def adopt(self, manifest: Manifest) -> None:
        """Take `manifest` as the record, logging nothing (the baseline of a start)."""
        self.files = dict(manifest.files)
        self.oversized = dict(manifest.oversized)

    def under(self, rel_dir: str) -> list[str]:
        prefix = rel_dir + "/"
        return [p for p in self.files if p.startswith(prefix)]

    def log_file(self, type_: str, rel: str, entry: FileEntry | None, *, synthetic: bool = False, **extra: Any) -> None:
        fields: dict[str, Any] = {"path": rel}
        if entry is not None:
            fields.update(sha256=entry.sha256, size=entry.size, mode=f"{entry.mode:o}")
        fields.update(extra)
        if synthetic:
            fields["synthetic"] = True
        self.log.append(type_, **fields)
        self.events_logged += 1
        self.changed.add(rel)
        if "dest" in extra:
            self.changed.add(extra["dest"])
        self.dirty = True

    def reconcile(self, fresh: Manifest) -> int:
        """Log synthetic events for every difference between the record and `fresh`; adopt it."""
        counts = {"created": 0, "modified": 0, "deleted": 0}
        for ch in diff(self.files, fresh.files):
            counts[ch.kind] += 1
            self.log_file(f"file_{ch.kind}", ch.path, ch.new, synthetic=True)
        for p, size in fresh.oversized.items():
            if self.oversized.get(p) != size and p not in self.files:
                self.log_file("file_modified" if p in self.oversized else "file_created", p, None,
                              synthetic=True, oversized=True, size=size)  # fmt: skip
        for p in set(self.oversized) - set(fresh.oversized) - set(fresh.files):
            self.log_file("file_deleted", p, None, synthetic=True)
        n = sum(counts.values())
        self.log.append("reconcile", files=len(fresh.files), synthetic=n, **counts)
        self.adopt(fresh)
        return n
