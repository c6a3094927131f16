"""Where the bridge keeps things on the host: one home for every default folder.

Nothing is ever written into the install folder, so a wheel installed into a read-only
site-packages works the same as a source checkout. Each folder can be moved by an environment
variable (documented in the README, "Files and folders"); the CLI flags (`--tasks`,
`--recordings`) override these in turn.

- shipped tasks: `$RGBRIDGE_TASKS`, else the package data `rgbridge_tasks` (read only).
- recordings:   `$RGBRIDGE_RECORDINGS`, else `<data home>/recordings`.
- data home:    `$RGBRIDGE_HOME`, else `$XDG_DATA_HOME/rgbridge` (`~/.local/share/rgbridge`).
- caches:       `$RGBRIDGE_CACHE`, else `$XDG_CACHE_HOME/rgbridge` (`~/.cache/rgbridge`);
                images' root filesystems, package and Maven caches, collection caches.
- agent envs:   `$RGBRIDGE_AGENTS_HOME`, else `$XDG_DATA_HOME/rgbridge-agents`: the library agents'
                environments (`rgbridge agents install`), apart from the data home because they
                are bound read-only into agents' sandboxes, which never see the data home.
The XDG rules are those of the freedesktop.org Base Directory Specification.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def _env_path(name: str) -> Path | None:
    raw = os.environ.get(name, "").strip()
    return Path(raw).expanduser() if raw else None


def _xdg(name: str, fallback: str) -> Path:
    # The spec says relative values are invalid and must be ignored.
    raw = os.environ.get(name, "").strip()
    base = Path(raw) if raw and os.path.isabs(raw) else Path.home() / fallback
    return base / "rgbridge"


def shipped_tasks_dir() -> Path:
    """The tasks shipped with the bridge (a folder of task folders)."""
    env = _env_path("RGBRIDGE_TASKS")
    if env is not None:
        return env
    # A source checkout (run in place or installed editable) reads its own `tasks/` folder;
    # an installed wheel reads the package data.
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "tasks").is_dir():
        return checkout / "tasks"
    # `rgbridge_tasks` is data only (no __init__.py): a namespace package, so ask for its folder.
    spec = importlib.util.find_spec("rgbridge_tasks")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the shipped tasks are missing from this install (package rgbridge_tasks); "
            "set RGBRIDGE_TASKS or pass --tasks"
        )
    return Path(list(spec.submodule_search_locations)[0])


def data_home() -> Path:
    """The bridge's user data folder (not created here: callers create what they write)."""
    return _env_path("RGBRIDGE_HOME") or _xdg("XDG_DATA_HOME", ".local/share")


def default_recordings_dir() -> Path:
    """Where sessions are recorded unless `--recordings` says otherwise. Never the caller's
    cwd, which is the home folder under some IDEs; the CLI and the MCP server share it."""
    return _env_path("RGBRIDGE_RECORDINGS") or data_home() / "recordings"


def cache_dir() -> Path:
    """The bridge's cache folder (created)."""
    path = _env_path("RGBRIDGE_CACHE") or _xdg("XDG_CACHE_HOME", ".cache")
    path.mkdir(parents=True, exist_ok=True)
    return path


def agents_home() -> Path:
    """Where `rgbridge agents install` builds the library agents' environments (not created here)."""
    return _env_path("RGBRIDGE_AGENTS_HOME") or _xdg("XDG_DATA_HOME", ".local/share").with_name("rgbridge-agents")
