"""Host facts the images are built from: the Debian mirror, extra CA certificates, pip index settings.

The Debian mirror comes from the host's apt sources; the CA certificates are the host's extra ones."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from bridge.errors import ScoringError

DEFAULT_SUITE = "bookworm"
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")


def _parse_apt_sources() -> list[tuple[str, list[str]]]:
    """(URI, suites) pairs from the host's apt sources, deb822 and one-line formats."""
    entries: list[tuple[str, list[str]]] = []
    src_dir = Path("/etc/apt/sources.list.d")
    for path in sorted(src_dir.glob("*.sources")) if src_dir.is_dir() else []:
        for para in re.split(r"\n\s*\n", path.read_text(errors="replace")):
            fields: dict[str, str] = {}
            for line in para.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
                continue
            for uri in fields.get("uris", "").split():
                entries.append((uri, fields.get("suites", "").split()))
    lists = [Path("/etc/apt/sources.list")]
    lists += sorted(src_dir.glob("*.list")) if src_dir.is_dir() else []
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            line = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
            if len(line) >= 3 and line[0] == "deb":
                entries.append((line[1], [line[2]]))
    return entries


def debian_source() -> tuple[str, str]:
    """(mirror URI, suite) for debootstrap: env overrides, else the host's apt sources."""
    suite = os.environ.get("RGBRIDGE_DEBIAN_SUITE", "").strip() or DEFAULT_SUITE
    mirror = os.environ.get("RGBRIDGE_DEBIAN_MIRROR", "").strip()
    if mirror:
        return mirror.rstrip("/"), suite
    for uri, suites in _parse_apt_sources():
        if suite in suites and uri.startswith(("http://", "https://", "file:/")):
            return uri.rstrip("/"), suite
    raise ScoringError(
        f"no apt source for Debian '{suite}' found in /etc/apt/sources.list(.d); "
        "set RGBRIDGE_DEBIAN_MIRROR to a Debian mirror URI"
    )


def host_extra_cas() -> list[tuple[str, bytes]]:
    """The host's locally added CA certificates (name, PEM), sorted: trusted in our images."""
    root = Path(os.environ.get("RGBRIDGE_EXTRA_CA_DIR", "") or HOST_CA_DIR)
    if os.environ.get("RGBRIDGE_TRUST_HOST_CAS", "1").lower() in ("0", "no", "false"):
        return []
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.rglob("*.crt")):
        if path.is_file():
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(path.relative_to(root)))
            out.append((name, path.read_bytes()))
    return out


_pip_settings: dict[str, str] | None = None
# One read per process: a build that needs the settings while the read started ahead
# (``read_pip_index_settings_ahead``) is still running waits for it instead of starting another.
_pip_lock = threading.Lock()


def host_pip_index_settings(*, fresh: bool = False) -> dict[str, str]:
    """Index settings of the host's pip (env wins over ``pip config``), forwarded to builds.

    Only index location settings are forwarded: a custom or mirror index configured for the
    host is what builds should use too. Certificates are handled by CA trust in the image, and
    host paths (find-links) mean nothing inside a container. Read once per process; ``fresh``
    reads them again without changing what this process's builds use (`rgbridge doctor`).
    """
    global _pip_settings
    if fresh:
        found = _read_pip_index_settings()
        with _pip_lock:
            if _pip_settings is None:
                _pip_settings = found
        return dict(found)
    with _pip_lock:
        if _pip_settings is None:
            _pip_settings = _read_pip_index_settings()
        return dict(_pip_settings)


def read_pip_index_settings_ahead() -> None:
    """Start reading the settings in the background. ``pip config list`` is a Python process of
    its own (0.4 s on a 2-core machine, docs/measurements.md): a scoring process starts it at once,
    so a never-seen set's build, which needs the settings first, does not wait for it."""
    if _pip_settings is None:
        threading.Thread(target=host_pip_index_settings, daemon=True, name="pip-settings").start()


def _read_pip_index_settings() -> dict[str, str]:
    keys = {"index-url": "PIP_INDEX_URL", "extra-index-url": "PIP_EXTRA_INDEX_URL", "trusted-host": "PIP_TRUSTED_HOST"}
    found: dict[str, str] = {}
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in keys and value:
            found[keys[name]] = value.strip().strip("'\"")
    for env in keys.values():
        if os.environ.get(env):
            found[env] = os.environ[env]
    return found
