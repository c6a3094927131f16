"""Capping what a tool call logs into a recording: every key and value, and the number of keys, so
no argument can bloat `events.jsonl`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bridge.recording.events import EventLog

MAX_LOGGED_CHARS = 2000
MAX_LOGGED_KEY_CHARS = 200
MAX_LOGGED_KEYS = 50


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def capped_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """Tool arguments as logged: keys and values capped, at most MAX_LOGGED_KEYS of them."""
    out: dict[str, Any] = {}
    for i, (key, value) in enumerate(arguments.items()):
        if i == MAX_LOGGED_KEYS:
            out["…"] = f"{len(arguments) - MAX_LOGGED_KEYS} more argument(s) not logged"
            break
        text = value if isinstance(value, (bool, int, float, type(None))) else str(value)
        out[clip(str(key), MAX_LOGGED_KEY_CHARS)] = text if not isinstance(text, str) else clip(text, MAX_LOGGED_CHARS)
    return out


def log_call(
    events: EventLog | None,
    server_log: Path,
    tool: str,
    arguments: dict[str, Any],
    *,
    ok: bool,
    error: str | None,
    session_id: str | None,
) -> None:
    """Log a tool call, capped, into its session's `events` (or `server_log` when there is none)."""
    safe_args = capped_arguments(arguments)
    error = clip(error, MAX_LOGGED_CHARS) if error is not None else None
    if events is None:
        log = EventLog(server_log)
        log.append("mcp_call", tool=tool, arguments=safe_args, ok=ok, error=error, session_id=session_id)
        log.close()
        return
    events.append("mcp_call", tool=tool, arguments=safe_args, ok=ok, error=error)
