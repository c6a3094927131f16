"""The options of the session layer as two frozen objects: `RecorderSettings` (how the recorder
watches and checkpoints a workspace) and `SessionSettings` (how a `SessionManager` runs its
sessions, the recorder's settings among them). They are built once from the command line or a
test and passed down whole through bridge/sessions/opening.py instead of one parameter each.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bridge.fs.ignore import EXCLUDED_DIRS
from bridge.recording.manifest import DEFAULT_MAX_FILE_BYTES
from bridge.sessions.models import Profile


@dataclass(frozen=True)
class RecorderSettings:
    """How the recorder (bridge/sessions/recorder.py) watches a workspace."""

    #: seconds a path must stay quiet before it is read and logged
    settle_seconds: float = 0.3
    #: directory names never recorded
    exclude: frozenset[str] = EXCLUDED_DIRS
    #: poll instead of placing inotify watches
    force_polling: bool = False
    #: larger files are logged as oversized and never stored (capped by the store's own limit)
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    #: commit checkpoints by itself (quiet, interval, max interval) besides the seal
    auto_checkpoint: bool = True
    checkpoint_quiet: float = 1.0
    checkpoint_interval: float = 5.0
    checkpoint_max_interval: float = 60.0
    #: seconds between scans when polling
    poll_interval: float = 1.0


@dataclass(frozen=True)
class SessionSettings:
    """How a SessionManager (bridge/sessions/manager.py) runs its sessions."""

    #: the scoring profile of submissions
    profile: Profile = "both"
    #: deploy-only practice checks allowed
    practice: bool = False
    #: the seal waits for this many quiet seconds, at most `seal_max_wait` seconds
    seal_quiet_seconds: float = 1.0
    seal_max_wait: float = 30.0
    #: re-attach the open sessions of earlier processes when the manager starts (a server start)
    reattach: bool = True
    #: scored attempts allowed per task within one run (bridge/sessions/attempts.py)
    attempts: int = 1
    #: the run's id; None makes a fresh one
    run_id: str | None = None
    #: a process that ends waits for the scoring jobs it started (bridge/sessions/jobs.py); False
    #: leaves them to be resumed by the next bridge
    finish_jobs_at_exit: bool = True
    recorder: RecorderSettings = field(default_factory=RecorderSettings)
