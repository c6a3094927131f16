"""Host facts the images are built from: the Debian mirror, extra CA certificates, pip index settings.

The Debian mirror comes from the host's apt sources; the CA certificates are the host's extra ones."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from bridge.errors import ScoringError
from bridge.locations import cache_dir

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
        found = _read_pip_index_settings(remembered=False)
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


#: how long settings read by `pip config list` are taken from the file that remembers them: a
#: bound on anything pip reads that ``_pip_config_files`` does not name
REMEMBER_SECONDS = 3600.0
_REMEMBERED = "pip-index-settings.json"


def _pip_config_files() -> list[Path]:
    """The files pip reads its configuration from here, as pip's configuration docs list them
    for Linux: the global ones (``pip/pip.conf`` in each of ``XDG_CONFIG_DIRS``, then
    ``/etc/pip.conf``), the user ones (``~/.pip/pip.conf``, then ``pip/pip.conf`` in
    ``XDG_CONFIG_HOME``), the site one (this interpreter's prefix) and ``PIP_CONFIG_FILE``."""
    files = [Path(d) / "pip" / "pip.conf" for d in os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":") if d]
    files.append(Path("/etc/pip.conf"))
    home = Path(os.path.expanduser("~"))
    files.append(home / ".pip" / "pip.conf")
    files.append(Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf")
    files.append(Path(sys.prefix) / "pip.conf")
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def _pip_config_key() -> str:
    """What `pip config list` answers from: the interpreter, its configuration files (each one's
    identity and size, or absence) and the environment's PIP_ settings."""
    files: list[object] = []
    for path in _pip_config_files():
        try:
            st = path.stat()
            files.append([str(path), st.st_mtime_ns, st.st_size, st.st_ino])
        except OSError:
            files.append([str(path), None])
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_"))
    return hashlib.sha256(json.dumps([sys.executable, files, env]).encode()).hexdigest()


def _remembered(key: str) -> dict[str, str] | None:
    """The settings an earlier process read with the same ``key``, not older than
    ``REMEMBER_SECONDS``: a scoring process then starts no `pip config list` (0.3 s of a
    never-seen set's build on this 2-core machine, docs/measurements.md)."""
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        data = json.loads((cache_dir() / _REMEMBERED).read_text(encoding="utf-8"))
        fresh = 0 <= time.time() - float(data["read"]) < REMEMBER_SECONDS
        settings = data["settings"]
        if data["key"] == key and fresh and all(isinstance(v, str) for v in settings.values()):
            return {str(k): v for k, v in settings.items()}
    return None


def _remember(key: str, settings: dict[str, str]) -> None:
    # an index address with credentials in it is never written down here
    if any("@" in value for value in settings.values()):
        return
    with contextlib.suppress(OSError):
        path = cache_dir() / _REMEMBERED
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps({"key": key, "read": time.time(), "settings": settings}), encoding="utf-8")
        os.replace(tmp, path)


def _read_pip_index_settings(*, remembered: bool = True) -> dict[str, str]:
    key = _pip_config_key()
    if remembered and (found := _remembered(key)) is not None:
        return found
    found = _read_pip_config()
    _remember(key, found)
    return found


def _read_pip_config() -> dict[str, str]:
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
