"""Shared helpers for the kv-ledger golden tests: every test makes its own uniquely named keys."""
from __future__ import annotations

import os
import uuid
from typing import Any, Callable

import pytest
import requests

BASE_URL = os.environ.get("SERVICE_BASE_URL", "http://localhost:8090").rstrip("/")
TIMEOUT = 5  # seconds: a dead service must fail fast, not hang


def call(method: str, path: str, **kwargs: Any) -> requests.Response:
    kwargs.setdefault("timeout", TIMEOUT)
    return requests.request(method, BASE_URL + path, **kwargs)


@pytest.fixture
def base_url() -> str:
    return BASE_URL


@pytest.fixture
def api() -> Callable[..., requests.Response]:
    return call


@pytest.fixture
def prefix() -> str:
    """A prefix no other test (or earlier run) uses, so the store is never assumed empty."""
    return f"t{uuid.uuid4().hex[:16]}."


def _assert_error(resp: requests.Response, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers.get("Content-Type", "").startswith("application/json")
    body = resp.json()
    assert isinstance(body.get("error"), str) and body["error"]
    assert body.get("code") == code
    return body


@pytest.fixture
def assert_error() -> Callable[[requests.Response, int, str], dict[str, Any]]:
    """Checks the documented error envelope {"error": str, "code": code} and returns the body."""
    return _assert_error
