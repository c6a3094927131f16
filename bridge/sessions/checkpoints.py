"""Commits of the recorded workspace to the shadow store: the scan that feeds them, the
reconciliation before each commit, and the `checkpoint` record that follows it.

Every checkpoint and the seal reconcile a fresh scan against the log of record
(bridge/sessions/recorded.py) before committing, so events inotify dropped still reach the
record. When the store finds a file changed between the scan and the commit (`StoreMismatch`),
the scan is taken again, up to four times. Callers hold the recorder's lock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.recording.events import EventLog
from bridge.recording.manifest import Change, FileEntry, Manifest, diff, scan
from bridge.recording.store import CommitResult, ShadowStore, StoreMismatch
from bridge.sessions.recorded import RecordedFiles


@dataclass(frozen=True, slots=True)
class Checkpoint:
    commit: str
    tree_hash: str
    changes: list[Change]  # vs the previous checkpoint
    reconciled: int = 0  # synthetic events emitted by this checkpoint's reconciliation
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Seal:
    commit: str
    tree_hash: str
    manifest: Manifest
    stable: bool
    seconds: float
    reconciled: int = 0
    left_out: list[str] = field(default_factory=list)


class Committer:
    """Scans the workspace and commits what the record holds, one checkpoint at a time."""

    def __init__(
        self,
        root: Path,
        *,
        log: EventLog,
        store: ShadowStore,
        recorded: RecordedFiles,
        exclude: frozenset[str],
        max_file_bytes: int,
    ) -> None:
        self.root = root
        self.log = log
        self.store = store
        self.recorded = recorded
        self.exclude = exclude
        self.max_file_bytes = max_file_bytes
        self.last_files: dict[str, FileEntry] = {}  # the files of the last checkpoint
        self.last_at = time.monotonic()  # when it was taken

    def scan(self, previous: Manifest | None | bool = True) -> Manifest:
        """Scan the workspace, re-hashing only what changed since the recorded manifest
        (`previous=True`) or everything (`previous=None`); new content goes into the store."""
        if previous is True:
            previous = Manifest(self.recorded.files, self.recorded.oversized)
        return scan(
            self.root,
            max_file_bytes=self.max_file_bytes,
            previous=previous or None,
            exclude=self.exclude,
            on_content=self.store.put_blob,
        )

    def commit(
        self, fresh: Manifest, reason: str, *, extra: dict[str, Any] | None = None
    ) -> tuple[Checkpoint, CommitResult]:
        """Reconcile the record with `fresh`, commit it and log the `checkpoint` record."""
        reconciled = 0
        for attempt in range(4):
            reconciled += self.recorded.reconcile(fresh)
            try:
                res = self.store.commit_manifest(fresh, f"{reason}: {len(fresh.files)} files")
                break
            except StoreMismatch:
                if attempt == 3:
                    raise
                fresh = self.scan(previous=None)
        changes = diff(self.last_files, fresh.files)
        self.log.append(
            "checkpoint",
            reason=reason,
            commit=res.commit,
            tree_hash=res.tree_hash,
            files=len(fresh.files),
            changes=len(changes),
            reconciled=reconciled,
            new_commit=res.created,
            left_out=res.left_out,
            **(extra or {}),
        )
        self.log.sync()
        self.last_files = dict(fresh.files)
        self.last_at = time.monotonic()
        self.recorded.dirty = False
        return Checkpoint(res.commit, res.tree_hash, changes, reconciled, reason), res
