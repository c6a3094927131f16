"""Fixed user accounts and the in-memory bearer-token registry."""
from __future__ import annotations

import hmac
import secrets
import threading
from dataclasses import dataclass
from typing import Literal

Role = Literal["librarian", "reader"]


@dataclass(frozen=True)
class User:
    username: str
    password: str
    role: Role


USERS: dict[str, User] = {
    u.username: u
    for u in (
        User("librarian", "shelf-keeper-42", "librarian"),
        User("alice", "alice-reads-1", "reader"),
        User("bob", "bob-reads-2", "reader"),
    )
}


def authenticate(username: str, password: str) -> User | None:
    """Return the user when the credentials match, else None."""
    user = USERS.get(username)
    # compare_digest keeps the comparison time independent of where the strings differ
    if user is None or not hmac.compare_digest(user.password.encode(), password.encode()):
        return None
    return user


class TokenRegistry:
    """Opaque tokens mapped to usernames; a token lives until it is revoked."""

    def __init__(self) -> None:
        self._tokens: dict[str, str] = {}
        self._lock = threading.Lock()

    def issue(self, user: User) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[token] = user.username
        return token

    def resolve(self, token: str) -> User | None:
        with self._lock:
            username = self._tokens.get(token)
        return USERS.get(username) if username is not None else None

    def revoke(self, token: str) -> bool:
        with self._lock:
            return self._tokens.pop(token, None) is not None
