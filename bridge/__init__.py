"""repogenesis-bridge core library: tasks, sessions, recorder, snapshots, scoring, replay, reports."""

__version__ = "0.4.0"
