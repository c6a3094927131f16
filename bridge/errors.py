"""Errors raised to users. Each carries a one-line, human-readable message."""

from __future__ import annotations


class BridgeError(Exception):
    """Base of every error the bridge reports to a user or a client."""


class TaskError(BridgeError):
    """A task folder, manifest or dataset entry is invalid or unknown."""


class PathError(BridgeError):
    """A client-supplied path escapes its root or is otherwise unusable."""


class SessionError(BridgeError):
    """A session operation is not possible in the current state."""


class ScoringError(BridgeError):
    """Scoring could not run (engine or bridge fault)."""


class RecordingError(BridgeError):
    """A recording is malformed, tampered with or unreadable."""
