"""Tokens of one model call, read on the side from the provider's answer as its bytes pass
through the gateway (streamed SSE or one JSON body), in one split for every API: input not read
from the cache, output, cache read, cache write.

Where each API puts its usage (the providers' API references): Anthropic `message_start.message.usage`
then `message_delta.usage` (output cumulative), or `usage` of a whole answer; OpenAI Responses
`response.completed`'s `response.usage` (`input_tokens` includes `input_tokens_details.cached_tokens`);
Chat Completions `usage` (the last chunk of a stream when `stream_options.include_usage` is set;
`prompt_tokens` includes `prompt_tokens_details.cached_tokens`); Gemini `usageMetadata`
(`promptTokenCount` includes `cachedContentTokenCount`; thoughts count as output).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from bridge.agents.adapters.keys import Api

#: a non-streamed body larger than this is passed through unread (no usage is invented for it)
MAX_BODY = 16 * 1024 * 1024
#: one SSE event larger than this is skipped: a stream cannot make the gateway hold it all
MAX_EVENT = 4 * 1024 * 1024
MAX_ERROR_TEXT = 2000


@dataclass
class Usage:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def add(self, other: Usage) -> None:
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class UsageReader:
    """Fed the answer's bytes as they arrive; `usage` is what the provider said it used (None: it
    said nothing), `error` the text of an error the stream carried, `completed` whether the answer
    reached its documented end."""

    def __init__(self, api: Api, *, streamed: bool) -> None:
        self.api = api
        self.streamed = streamed
        self.usage: Usage | None = None
        self.error: str | None = None
        self.completed = False
        self._buffer = bytearray()
        self._skipping = False

    def feed(self, chunk: bytes) -> None:
        if not self.streamed:
            if len(self._buffer) + len(chunk) <= MAX_BODY:
                self._buffer += chunk
            else:
                self._skipping = True
            return
        self._buffer += chunk.replace(b"\r\n", b"\n")
        while True:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                if len(self._buffer) > MAX_EVENT:  # an event too large to hold: dropped, not parsed
                    self._buffer.clear()
                    self._skipping = True
                return
            event = bytes(self._buffer[:end])
            del self._buffer[: end + 2]
            if self._skipping:
                self._skipping = False
                continue
            self._event(event)

    def close(self) -> None:
        if self.streamed:
            if self._buffer.strip() and not self._skipping:
                self._event(bytes(self._buffer))
        elif not self._skipping and self._buffer:
            try:
                data = json.loads(bytes(self._buffer))
            except (ValueError, UnicodeDecodeError):
                data = None
            if isinstance(data, dict):
                self._whole(data)
            elif isinstance(data, list):  # Gemini's non-SSE stream is one JSON array of chunks
                for item in data:
                    self._gemini(_dict(item))
        self._buffer.clear()

    def error_text(self, limit: int = MAX_ERROR_TEXT) -> str:
        """The body of a non-streamed answer (an error's text), cut to `limit` characters."""
        return bytes(self._buffer[:limit]).decode("utf-8", "replace")

    # ------------------------------------------------------------------ one event / one body
    def _event(self, raw: bytes) -> None:
        lines = [line[5:].strip() for line in raw.split(b"\n") if line.startswith(b"data:")]
        if not lines:
            return
        payload = b"\n".join(lines)
        if payload == b"[DONE]":
            self.completed = True
            return
        try:
            data = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            return
        if not isinstance(data, dict):
            return
        if self.api == "anthropic":
            self._anthropic_event(data)
        elif self.api == "openai":
            self._openai_event(data)
        else:
            self._gemini(data)

    def _anthropic_event(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "message_start":
            self.usage = self._anthropic_usage(_dict(_dict(data.get("message")).get("usage")), Usage())
        elif kind == "message_delta":
            self.usage = self._anthropic_usage(_dict(data.get("usage")), self.usage or Usage())
        elif kind == "message_stop":
            self.completed = True
        elif kind == "error":
            error = _dict(data.get("error"))
            self.error = f"{error.get('type', 'error')}: {error.get('message', '')}"[:MAX_ERROR_TEXT]

    @staticmethod
    def _anthropic_usage(raw: dict[str, Any], into: Usage) -> Usage:
        # message_delta's counts are cumulative: each one present replaces the earlier figure
        if "input_tokens" in raw:
            into.input = _int(raw["input_tokens"])
        if "output_tokens" in raw:
            into.output = _int(raw["output_tokens"])
        if "cache_read_input_tokens" in raw:
            into.cache_read = _int(raw["cache_read_input_tokens"])
        if "cache_creation_input_tokens" in raw:
            into.cache_write = _int(raw["cache_creation_input_tokens"])
        return into

    def _openai_event(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind in ("response.completed", "response.incomplete"):
            self.usage = self._responses_usage(_dict(_dict(data.get("response")).get("usage")))
            self.completed = True
        elif kind in ("response.failed", "error"):
            error = _dict(data.get("error")) or _dict(_dict(data.get("response")).get("error"))
            self.error = f"{error.get('code') or error.get('type') or 'error'}: {error.get('message', '')}"[
                :MAX_ERROR_TEXT
            ]
        elif "choices" in data or "usage" in data:  # a Chat Completions chunk
            if isinstance(data.get("usage"), dict):
                self.usage = self._chat_usage(data["usage"])
            if isinstance(data.get("error"), dict):
                self.error = str(data["error"].get("message", "error"))[:MAX_ERROR_TEXT]

    @staticmethod
    def _openai_usage(raw: dict[str, Any], prefix: str, output: str) -> Usage:
        """OpenAI's usage: `{prefix}_tokens` counts the cached ones too (`{prefix}_tokens_details`)."""
        cached = _int(_dict(raw.get(f"{prefix}_tokens_details")).get("cached_tokens"))
        return Usage(
            input=max(0, _int(raw.get(f"{prefix}_tokens")) - cached), output=_int(raw.get(output)), cache_read=cached
        )

    @classmethod
    def _responses_usage(cls, raw: dict[str, Any]) -> Usage:
        return cls._openai_usage(raw, "input", "output_tokens")

    @classmethod
    def _chat_usage(cls, raw: dict[str, Any]) -> Usage:
        return cls._openai_usage(raw, "prompt", "completion_tokens")

    def _gemini(self, data: dict[str, Any]) -> None:
        meta = data.get("usageMetadata")
        if isinstance(meta, dict):  # each chunk's figures are the call's so far: the last one stands
            cached = _int(meta.get("cachedContentTokenCount"))
            self.usage = Usage(
                input=max(0, _int(meta.get("promptTokenCount")) - cached),
                output=_int(meta.get("candidatesTokenCount")) + _int(meta.get("thoughtsTokenCount")),
                cache_read=cached,
            )
        for candidate in data.get("candidates") or []:
            if isinstance(candidate, dict) and candidate.get("finishReason"):
                self.completed = True
        if isinstance(data.get("error"), dict):
            self.error = str(data["error"].get("message", "error"))[:MAX_ERROR_TEXT]

    def _whole(self, data: dict[str, Any]) -> None:
        if self.api == "anthropic":
            if data.get("type") == "error":
                self._anthropic_event(data)
                return
            if isinstance(data.get("usage"), dict):
                self.usage = self._anthropic_usage(data["usage"], Usage())
                self.completed = True
        elif self.api == "openai":
            usage = _dict(data.get("usage"))
            if usage:
                chat = "prompt_tokens" in usage or "choices" in data
                self.usage = self._chat_usage(usage) if chat else self._responses_usage(usage)
                self.completed = True
        else:
            self._gemini(data)
            self.completed = self.completed or self.usage is not None
