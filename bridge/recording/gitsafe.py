"""One isolated way to run git on a shadow store, and one check that a store is bridge-shaped.

A store can arrive from a recording archive, i.e. from anybody. Git reads a repository's own
`config` unconditionally, and a config with `extensions.partialClone` plus a promisor pack makes
`git cat-file` lazily fetch through the remote's URL (an `ext::` URL runs a command). So: git runs
with no system/global config, lazy fetch off, every transport protocol forbidden, hooks off, and a
store whose config or layout is anything the bridge does not write itself is refused before git
ever touches it (docs/recording-format.md, "Store").
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from bridge.errors import RecordingError

# `-c` options put before every git subcommand (they override the store's config).
HARDENING_ARGS: tuple[str, ...] = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "protocol.allow=never",
    "-c", "protocol.ext.allow=never",
    "-c", "protocol.file.allow=never",
    "-c", "core.sshCommand=false",
    "-c", "uploadpack.packObjectsHook=",
)  # fmt: skip

# The only [core] keys `git init --bare` (and the bridge) ever writes.
_ALLOWED_CORE = {
    "repositoryformatversion": {"0"},
    "filemode": {"true", "false"},
    "bare": {"true"},
    "logallrefupdates": {"true", "false"},
    "ignorecase": {"true", "false"},
    "precomposeunicode": {"true", "false"},
    "symlinks": {"true", "false"},
}
_SECTION = re.compile(r"^\s*\[\s*([A-Za-z0-9.-]+)(\s+\"[^\"]*\")?\s*\]\s*$")
_KEYVAL = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*?))?\s*$")


def isolated_git_env(git_dir: Path, **extra: str) -> dict[str, str]:
    """Environment for git on `git_dir`: no inherited GIT_*, no system/global config, no fetching."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_DIR=str(git_dir),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_ATTR_NOSYSTEM="1",
        GIT_NO_LAZY_FETCH="1",
        GIT_ALLOW_PROTOCOL="none",
        GIT_PROTOCOL_FROM_USER="0",
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        HOME=str(git_dir),
        XDG_CONFIG_HOME=str(git_dir),
        LC_ALL="C",
    )
    env.setdefault("PATH", "/usr/bin:/bin")
    env.update(extra)
    return env


def check_store_layout(git_dir: Path) -> None:
    """Refuse a store whose config or layout the bridge did not write (raises RecordingError)."""
    where = str(git_dir)
    config = git_dir / "config"
    if config.is_symlink():
        raise RecordingError(f"{where}: store config is a symlink: refused")
    if config.exists():
        section = ""
        for raw in config.read_bytes().decode("utf-8", "replace").splitlines():
            line = raw.split("#", 1)[0].split(";", 1)[0].strip()
            if not line:
                continue
            m = _SECTION.match(line)
            if m:
                section = m.group(1).lower() + (m.group(2) or "")
                if section != "core":
                    raise RecordingError(
                        f"{where}: store config has a [{section}] section the bridge never writes: refused"
                    )
                continue
            kv = _KEYVAL.match(line)
            key = kv.group(1).lower() if kv else ""
            value = (kv.group(2) or "true").strip().strip('"').lower() if kv else ""
            if section != "core" or key not in _ALLOWED_CORE or value not in _ALLOWED_CORE[key]:
                raise RecordingError(
                    f"{where}: store config sets {section or '?'}.{key or line!r}, which the bridge never writes: refused"
                )
    info = git_dir / "objects" / "info"
    for name in ("alternates", "http-alternates"):
        if (info / name).exists() or (info / name).is_symlink():
            raise RecordingError(f"{where}: store refers to other object stores ({name}): refused")
    pack_dir = git_dir / "objects" / "pack"
    if pack_dir.is_dir():
        for p in pack_dir.iterdir():
            if p.name.endswith(".promisor"):
                raise RecordingError(f"{where}: store has a promisor pack ({p.name}): refused")
    hooks = git_dir / "hooks"
    if hooks.is_dir():
        for p in hooks.iterdir():
            if not p.name.endswith(".sample"):
                raise RecordingError(f"{where}: store has a hook ({p.name}): refused")
    for name in ("shallow", "commondir", "gitdir"):
        if (git_dir / name).exists():
            raise RecordingError(f"{where}: store has {name!r}, which the bridge never writes: refused")
