"""HTTP client credentials: one bearer token per client config, derived from the server's secret,
so that over HTTP a session belongs to the client that started it whatever the protocol era.

A 2026-07-28 client (Claude Code over HTTP) sends every request on its own: there is no MCP
session to tell two clients apart, only what each request carries. So each client config gets its
own bearer token, `rgbc1.<client id>.<mac>`, where the mac is an HMAC-SHA256 of the client id
keyed with the server's secret (its bearer token, kept in the recordings folder with mode 0600).
The server needs no list of clients: it recomputes the mac (constant-time compare), and the client
id is the caller's identity. Anyone who can mint a credential can read the server's secret anyway;
a client holding only its own credential cannot forge another's. Rotating the server token
(`rgbridge serve --token`) revokes every credential minted from the old one.

`mint_client_credential` is the one way to make one (`rgbridge ide-config --transport http` mints
one per config; an unattended agent run mints one per attempt).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

PREFIX = "rgbc1"
#: the server's secret, in the recordings folder (written by `rgbridge serve --transport http`)
SERVER_TOKEN_FILE = "http-token"
_CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAC_HEX = 32  # 128 bits of the HMAC


@dataclass(frozen=True)
class ClientCredential:
    client_id: str
    token: str  # what the client sends: `Authorization: Bearer <token>`


def _mac(server_token: str, client_id: str) -> str:
    digest = hmac.new(server_token.encode("utf-8"), f"rgbridge-client-v1:{client_id}".encode(), hashlib.sha256)
    return digest.hexdigest()[:_MAC_HEX]


def client_id_for(label: str) -> str:
    """A stable client id for a label (an IDE and its workspace): writing the same config again
    keeps its identity, so the sessions it started stay reachable."""
    return hashlib.sha256(label.encode("utf-8")).hexdigest()[:16]


def mint_client_credential(server_token: str, client_id: str | None = None) -> ClientCredential:
    """A credential for one client of the server whose bearer token is `server_token`; a fresh
    random client id unless one is given (`[A-Za-z0-9_-]`, at most 64 characters)."""
    if not server_token:
        raise ValueError("no server token to mint a client credential from")
    cid = client_id if client_id is not None else secrets.token_hex(8)
    if not _CLIENT_ID.fullmatch(cid):
        raise ValueError(f"client id {cid!r} must be 1-64 characters of A-Z a-z 0-9 _ -")
    return ClientCredential(client_id=cid, token=f"{PREFIX}.{cid}.{_mac(server_token, cid)}")


def is_client_token(value: str) -> bool:
    """`value` has the shape of a client credential (not necessarily a valid one)."""
    return value.startswith(PREFIX + ".")


def verify_client_token(server_token: str, presented: str) -> str | None:
    """The client id of a credential minted from `server_token`, or None when `presented` is not one."""
    parts = presented.split(".")
    if len(parts) != 3 or parts[0] != PREFIX or not _CLIENT_ID.fullmatch(parts[1]):
        return None
    if not hmac.compare_digest(parts[2].encode("ascii", "replace"), _mac(server_token, parts[1]).encode("ascii")):
        return None
    return parts[1]


def read_server_token(recordings_dir: Path) -> str | None:
    """The server's secret as `rgbridge serve --transport http` left it for this recordings folder."""
    try:
        return (recordings_dir / SERVER_TOKEN_FILE).read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None
