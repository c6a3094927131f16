"""The one set of rules for which workspace files the bridge leaves out.

Every reader of a workspace or of a snapshot uses these: the recorder's watches and scans,
manifests and tree hashes, the shadow store's exclude file, staging a snapshot for scoring,
exporting a scored repo and `recordings verify`. Because the recorder and the scoring engine leave out
exactly the same files, the recorder's tree hash and the engine's snapshot hash of one workspace
are the same number.

The rules are a superset of what upstream leaves out when it copies a repo
(`UPSTREAM_COPY_IGNORE`, docs/strict-rules.md); the extra names are build, vendor, VCS and IDE
folders and editor temp files, none of which is source an agent hands in.
"""

from __future__ import annotations

import re

# Build, vendor, VCS and IDE folders: never watched, never recorded, never snapshotted.
# `env` is deliberately absent: it is a plausible source folder name (e.g. `app/env/`).
EXCLUDED_DIRS: frozenset[str] = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        "dist",
        "build",
        "target",
        ".idea",
        ".vscode",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".tox",
        ".nox",
        ".gradle",
        ".cursor",
        ".agents",
        ".rgbridge",
    }
)
EXCLUDED_DIR_SUFFIXES: tuple[str, ...] = (".egg-info",)
#: files left out by name (upstream leaves out `.DS_Store`)
IGNORED_FILE_NAMES: frozenset[str] = frozenset({".DS_Store"})
#: files left out by suffix (upstream leaves out `*.pyc` at any depth)
IGNORED_FILE_SUFFIXES: tuple[str, ...] = (".pyc",)
#: what upstream's copy of a repo leaves out, at any depth (docs/upstream.md §2.3);
#: kept as data for the container copy and for verifying recordings scored before the rules met
UPSTREAM_COPY_IGNORE: tuple[str, ...] = (".git", "__pycache__", "*.pyc", ".DS_Store", "node_modules", ".venv", "venv")

_TEMP_RE = re.compile(
    r"""(
        .*\.sw[a-px]$           # vim swap files (.swp, .swo, .swx, ...)
      | .*~$                    # vim/emacs backups
      | 4913$                   # vim's write-permission probe
      | .*___jb_(tmp|old)___$   # JetBrains safe-write
      | \.\#.*                  # emacs lock files
      | .*\.tmp\.\d+$           # write-temp-then-rename (<name>.tmp.<pid>)
      | .*\.crswap$             # Chrome/VS Code web swap files
      | \.~lock\..*\#$          # LibreOffice locks
    )""",
    re.VERBOSE,
)


def is_excluded_dir(name: str, exclude: frozenset[str] | set[str] = EXCLUDED_DIRS) -> bool:
    """True when a directory with this base name is never recorded."""
    return name in exclude or name.endswith(EXCLUDED_DIR_SUFFIXES)


def is_temp_file(name: str) -> bool:
    """True for editor temp/backup/lock names kept out of the log of record."""
    return _TEMP_RE.fullmatch(name) is not None


def is_ignored_file(name: str) -> bool:
    """True when a file with this base name is never recorded, hashed or staged."""
    return name in IGNORED_FILE_NAMES or name.endswith(IGNORED_FILE_SUFFIXES) or is_temp_file(name)


def is_recorded_rel(rel: str, exclude: frozenset[str] | set[str] = EXCLUDED_DIRS) -> bool:
    """True when a POSIX relative file path belongs to the record (no excluded dir, no ignored name)."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    if any(is_excluded_dir(p, exclude) for p in parts[:-1]):
        return False
    return not is_ignored_file(parts[-1])
