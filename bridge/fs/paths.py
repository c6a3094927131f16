"""Confinement of client-supplied paths to a root.

Confinement is decided on resolved paths and path components, never on string prefixes
(CVE-2025-53110 passed `/root_extra` through a `startswith('/root')` check; CVE-2025-53109
escaped through a symlink inside the root).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from bridge.errors import PathError
from bridge.fs.relpath import rel_parts


def _resolve_deepest(path: Path) -> Path:
    """Resolve symlinks in the deepest existing ancestor of `path` and re-join the rest."""
    missing: list[str] = []
    current = path
    while not current.exists() and not current.is_symlink():
        if current.parent == current:
            break
        missing.append(current.name)
        current = current.parent
    resolved = current.resolve(strict=False)
    for name in reversed(missing):
        resolved = resolved / name
    return resolved


def confine(root: Path, relative: str | os.PathLike[str]) -> Path:
    """Return `relative` resolved inside `root`, or raise PathError.

    `relative` may be relative to `root` or absolute (then it must still lie inside `root`).
    Any `..` or symlink that leads outside `root` is refused.
    """
    text = os.fspath(relative)
    if "\x00" in text:
        raise PathError("path contains a NUL byte")
    root_resolved = Path(root).resolve(strict=True)
    candidate = Path(text)
    if not candidate.is_absolute():
        candidate = root_resolved / candidate
    resolved = _resolve_deepest(Path(os.path.normpath(candidate)))
    # normpath alone would turn `a/../../x` into `../x`; also check the raw components.
    if not resolved.is_relative_to(root_resolved):
        raise PathError(f"path {text!r} is outside {root_resolved}")
    if candidate.is_symlink() or resolved.is_symlink():
        target = candidate.resolve(strict=False)
        if not target.is_relative_to(root_resolved):
            raise PathError(f"path {text!r} is a symlink leading outside {root_resolved}")
    return resolved


def safe_relative(name: str) -> PurePosixPath:
    """Validate a relative POSIX path taken from untrusted data (bridge/fs/relpath.py rules)."""
    return PurePosixPath(*rel_parts(name))
