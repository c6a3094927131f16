"""The wire transcript of one attempt (`agent/wire.jsonl` in its attempt folder and recording):
one JSON line per model call with the request the agent sent and the answer the provider gave,
credential headers, `key=` query parameters and every known secret's text redacted, bodies cut
at a size; a call the gateway refused itself (a cost cap, an unpriced model) is a record of its
own, marked refused. It is what the agent and the provider said to each other, whatever the CLI
printed. It is read back by bridge/recording/wire_transcript.py, the one reader of the file.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

REDACTED = "[redacted]"
#: headers that carry credentials or session state, in either direction
SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "x-goog-api-key", "api-key", "cookie", "set-cookie"}
)
MAX_BODY_CHARS = 1_000_000


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if k.lower() in SECRET_HEADERS else v) for k, v in headers.items()}


def redact_query(query: str) -> str:
    if not query:
        return ""
    pairs = parse_qsl(query, keep_blank_values=True)
    return urlencode([(k, REDACTED if k.lower() in ("key", "api_key", "token") else v) for k, v in pairs])


def redact_text(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 8:
            text = text.replace(secret, REDACTED)
    return text


def body_text(raw: bytes, secrets: list[str]) -> str:
    text = raw[:MAX_BODY_CHARS].decode("utf-8", "replace")
    if len(raw) > MAX_BODY_CHARS:
        text += f"... [{len(raw) - MAX_BODY_CHARS} more bytes]"
    return redact_text(text, secrets)


class Transcript:
    """Appends one record per call to `path` (created 0600: it holds the conversation)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fresh = not self.path.exists()
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line)
            if fresh:
                self.path.chmod(0o600)
