"""One docker-py client per process, an availability probe and the label vocabulary.

The client honours ``DOCKER_HOST`` (and ``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH``) through
``docker.from_env``. Its socket timeout is large because docker-py applies one read timeout to
every call, and a silent ``pip install`` step during a build can exceed the library's 60 s
default. The pool is sized for parallel workers (the default of 10 logs "Connection pool is
full").
"""

from __future__ import annotations

import os
import threading

import docker
from docker.errors import DockerException

from bridge.errors import ScoringError

# Labels put on every container, image and network we create (sweeps select on LABEL_OWNER).
LABEL_OWNER = "rgbridge.owner"
OWNER_VALUE = "rgbridge"
LABEL_RUN = "rgbridge.run_id"
LABEL_TASK = "rgbridge.task"
LABEL_KIND = "rgbridge.kind"

DEFAULT_TIMEOUT = 900
DEFAULT_POOL_SIZE = 32
PING_TIMEOUT = 5

_lock = threading.Lock()
_client: docker.DockerClient | None = None
_client_pid: int | None = None


def owner_filter() -> str:
    """The ``label=`` filter value that selects everything rgbridge owns."""
    return f"{LABEL_OWNER}={OWNER_VALUE}"


def make_labels(
    *, kind: str, run_id: str | None = None, task: str | None = None, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """Labels for a new object: owner and kind always, run and task when known."""
    labels = {LABEL_OWNER: OWNER_VALUE, LABEL_KIND: kind}
    if run_id:
        labels[LABEL_RUN] = run_id
    if task:
        labels[LABEL_TASK] = task
    if extra:
        labels.update(extra)
    return labels


def _timeout() -> int:
    raw = os.environ.get("RGBRIDGE_DOCKER_TIMEOUT", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_TIMEOUT


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else type(exc).__name__
    host = os.environ.get("DOCKER_HOST") or "the default socket"
    return f"Docker engine unreachable at {host}: {first[:300]}"


def get_client() -> docker.DockerClient:
    """The process-wide client (re-created after a fork). Raises ScoringError if unreachable."""
    global _client, _client_pid
    with _lock:
        if _client is not None and _client_pid == os.getpid():
            return _client
        try:
            client = docker.from_env(timeout=_timeout(), max_pool_size=DEFAULT_POOL_SIZE)
        except DockerException as exc:
            raise ScoringError(_describe(exc)) from exc
        _client, _client_pid = client, os.getpid()
        return client


def reset_client() -> None:
    """Drop the cached client (tests, or after the engine restarted)."""
    global _client, _client_pid
    with _lock:
        if _client is not None and _client_pid == os.getpid():
            try:
                _client.close()
            except Exception:  # closing a dead connection pool must not mask the caller's path
                pass
        _client, _client_pid = None, None


def engine_available(timeout: float = PING_TIMEOUT) -> tuple[bool, str]:
    """Ping the engine with a short timeout. Returns (ok, reason text)."""
    try:
        probe = docker.from_env(timeout=max(1, int(timeout)))
    except DockerException as exc:
        return False, _describe(exc)
    try:
        probe.ping()
        version = probe.version()
        return True, f"Docker Engine {version.get('Version', '?')} (API {version.get('ApiVersion', '?')})"
    except Exception as exc:  # requests' ConnectionError/ReadTimeout, APIError, ...
        return False, _describe(exc)
    finally:
        probe.close()


def require_engine() -> docker.DockerClient:
    """The client, after a successful ping; ScoringError with the reason otherwise."""
    ok, reason = engine_available()
    if not ok:
        raise ScoringError(reason)
    return get_client()
