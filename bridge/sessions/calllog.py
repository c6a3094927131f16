"""Capping what a tool call logs into a recording: every key and value, and the number of keys, so
no argument can bloat `events.jsonl`."""

from __future__ import annotations

from typing import Any

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
