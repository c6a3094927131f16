"""bridge/credentials.py: client credentials minted from the server's token (issue 20, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.credentials import (
    client_id_for,
    is_client_token,
    mint_client_credential,
    read_server_token,
    verify_client_token,
)

SECRET = "server-token-" + "s" * 30


def test_mint_and_verify() -> None:
    cred = mint_client_credential(SECRET, "attempt-1")
    assert cred.client_id == "attempt-1" and is_client_token(cred.token)
    assert verify_client_token(SECRET, cred.token) == "attempt-1"
    fresh = mint_client_credential(SECRET)
    assert fresh.client_id != mint_client_credential(SECRET).client_id  # random unless given
    assert verify_client_token(SECRET, fresh.token) == fresh.client_id
    assert client_id_for("cursor\0/ws") == client_id_for("cursor\0/ws") != client_id_for("claude\0/ws")


@pytest.mark.parametrize(
    "presented",
    [
        "",
        SECRET,
        "rgbc1",
        "rgbc1..",
        "rgbc1.a.b.c",
        "rgbc1.attempt-1.",
        "rgbc1.attempt 1.00",
        "rgbc1.é.00",
        "rgbc2.attempt-1." + "0" * 32,
    ],
)
def test_malformed_tokens_are_not_credentials(presented: str) -> None:
    assert verify_client_token(SECRET, presented) is None


def test_a_credential_is_bound_to_its_id_and_its_server() -> None:
    cred = mint_client_credential(SECRET, "a")
    mac = cred.token.rsplit(".", 1)[1]
    assert verify_client_token(SECRET, f"rgbc1.b.{mac}") is None  # another id with a's mac
    assert verify_client_token("another-server-token-000000", cred.token) is None
    assert verify_client_token(SECRET, cred.token[:-1] + ("0" if cred.token[-1] != "0" else "1")) is None


def test_bad_ids_and_secrets_are_refused() -> None:
    for bad in ("", "a.b", "x" * 65, "a b", "../x"):
        with pytest.raises(ValueError):
            mint_client_credential(SECRET, bad)
    with pytest.raises(ValueError):
        mint_client_credential("")


def test_read_server_token(tmp_path: Path) -> None:
    assert read_server_token(tmp_path) is None
    (tmp_path / "http-token").write_text(SECRET + "\n")
    assert read_server_token(tmp_path) == SECRET
