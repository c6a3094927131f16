"""Per-attempt placeholder credentials: what an agent holds instead of the provider's key. The
gateway mints one when an attempt starts, maps every request carrying it to that attempt's
ledger, and refuses it once the attempt has ended (revoked). A placeholder is worth nothing
anywhere but at this gateway, for this attempt, while it runs.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from typing import Generic, TypeVar

PREFIX = "rgbridge-attempt-"
T = TypeVar("T")


class Placeholders(Generic[T]):
    def __init__(self) -> None:
        self._live: dict[str, T] = {}
        self._lock = threading.Lock()

    def mint(self, owner: T) -> str:
        token = PREFIX + secrets.token_urlsafe(24)
        with self._lock:
            self._live[token] = owner
        return token

    def revoke(self, token: str) -> None:
        with self._lock:
            self._live.pop(token, None)

    def owner(self, token: str | None) -> T | None:
        """The attempt a credential belongs to, or None (unknown or revoked), compared in
        constant time so that a guess learns nothing from the timing."""
        if not token or not token.startswith(PREFIX):
            return None
        with self._lock:
            found = None
            for live, owner in self._live.items():
                if hmac.compare_digest(live.encode(), token.encode()):
                    found = owner
            return found
