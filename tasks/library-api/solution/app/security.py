"""Bearer-token checks shared by route dependencies and the validation-error handler."""
from __future__ import annotations

from typing import Callable, Literal, Optional, TypeVar

from fastapi import Depends, Header, HTTPException, status

from .accounts import TokenRegistry, User

Access = Literal["public", "user", "librarian"]
F = TypeVar("F", bound=Callable[..., object])

tokens = TokenRegistry()
# endpoint function -> access level; read when a request fails validation (see main.py)
ACCESS: dict[Callable[..., object], Access] = {}


def access(level: Access) -> Callable[[F], F]:
    """Record which callers may use an endpoint."""

    def mark(fn: F) -> F:
        ACCESS[fn] = level
        return fn

    return mark


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


def parse_bearer(header: Optional[str]) -> str:
    if not header:
        raise unauthorized("missing bearer token")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise unauthorized("authorization header must be 'Bearer <token>'")
    return token


def user_for(header: Optional[str]) -> tuple[str, User]:
    token = parse_bearer(header)
    user = tokens.resolve(token)
    if user is None:
        raise unauthorized("invalid or revoked token")
    return token, user


def check_access(header: Optional[str], level: Access) -> Optional[HTTPException]:
    """The 401/403 error a caller would get for an endpoint of this level, if any."""
    if level == "public":
        return None
    try:
        _, user = user_for(header)
    except HTTPException as exc:
        return exc
    if level == "librarian" and user.role != "librarian":
        return HTTPException(status.HTTP_403_FORBIDDEN, "librarian role required")
    return None


def current_token(authorization: Optional[str] = Header(default=None)) -> str:
    return user_for(authorization)[0]


def current_user(authorization: Optional[str] = Header(default=None)) -> User:
    return user_for(authorization)[1]


def librarian(user: User = Depends(current_user)) -> User:
    if user.role != "librarian":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "librarian role required")
    return user
