"""Capped capture of a process's output: the head and the tail kept, the middle counted.

A hostile service can print without end; logs and exec output are streamed through `HeadTail`
so memory stays bounded and both the start (phase markers) and the end (the verdict) survive.
"""

from __future__ import annotations

import re
from collections import deque

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


class HeadTail:
    """Keep the first and last ``cap/2`` bytes of a stream, counting what was dropped."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        if len(self.head) < self.head_cap:
            take = self.head_cap - len(self.head)
            self.head += chunk[:take]
            chunk = chunk[take:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_len += len(chunk)
        while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_cap:
            self.tail_len -= len(self.tail[0])
            self.dropped += len(self.tail.popleft())
        if self.tail_len > self.tail_cap:  # trim the oldest chunk partially
            cut = self.tail_len - self.tail_cap
            self.tail[0] = self.tail[0][cut:]
            self.tail_len -= cut
            self.dropped += cut

    def text(self) -> str:
        body = bytes(self.head)
        if self.dropped:
            body += f"\n[... {self.dropped} bytes truncated ...]\n".encode()
        body += b"".join(self.tail)
        return strip_ansi(body.decode("utf-8", errors="replace"))


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)
