"""Which folder a session works in.

Order: the server's `--workspace` (or $RGBRIDGE_WORKSPACE), then `CLAUDE_PROJECT_DIR`; these
form the *root*. A `workspace` tool argument may then pick the root itself or a subfolder of
it (confined with `bridge.fs.paths.confine`: no `..` or symlink escapes). Without a root the
argument must be an absolute path. Values still containing `${` are IDE variables that were
never expanded and are treated as absent.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from bridge.errors import PathError
from bridge.fs.paths import confine

log = logging.getLogger("mcp_server.workspace")


@dataclass(frozen=True)
class WorkspaceRoot:
    path: Path
    source: str  # "--workspace", "RGBRIDGE_WORKSPACE" or "CLAUDE_PROJECT_DIR"


@dataclass(frozen=True)
class ResolvedWorkspace:
    path: Path
    source: str


def _usable(value: str | None, source: str) -> str | None:
    if not value or not value.strip():
        return None
    if "${" in value:
        log.warning("ignoring %s=%r: it holds an unexpanded IDE variable", source, value)
        return None
    return value


def find_root(explicit: Path | str | None, environ: dict[str, str] | None = None) -> WorkspaceRoot | None:
    """The configured workspace root, or None when nothing configures one."""
    env = os.environ if environ is None else environ
    candidates: list[tuple[str | None, str]] = [
        (str(explicit) if explicit is not None else None, "--workspace"),
        (env.get("RGBRIDGE_WORKSPACE"), "RGBRIDGE_WORKSPACE"),
        (env.get("CLAUDE_PROJECT_DIR"), "CLAUDE_PROJECT_DIR"),
    ]
    for value, source in candidates:
        usable = _usable(value, source)
        if usable is not None:
            path = Path(os.path.abspath(os.path.expanduser(usable)))
            log.info("workspace root from %s: %s", source, path)
            return WorkspaceRoot(path=path, source=source)
    return None


def resolve_workspace(root: WorkspaceRoot | None, argument: str | None) -> ResolvedWorkspace:
    """The workspace a `start_task` call means, or PathError."""
    if argument is not None and not argument.strip():
        argument = None
    if argument is not None and "${" in argument:
        raise PathError(f"workspace {argument!r} contains an unexpanded IDE variable")
    if root is None:
        if argument is None:
            raise PathError(
                "no workspace configured: pass an absolute 'workspace' path, or start the server with --workspace"
            )
        path = Path(os.path.expanduser(argument))
        if not path.is_absolute():
            raise PathError(f"workspace {argument!r} must be an absolute path (the server has no --workspace)")
        if ".." in path.parts:
            raise PathError(f"workspace {argument!r} must not contain '..'")
        return ResolvedWorkspace(path=path, source="tool argument")
    # confine() needs an existing root; the root folder is ours to create.
    root.path.mkdir(parents=True, exist_ok=True)
    if argument is None:
        return ResolvedWorkspace(path=root.path.resolve(), source=root.source)
    try:
        inside = confine(root.path, argument)
    except OSError as exc:  # a folder on the path changed while it was resolved (ENOTDIR, ELOOP, ...)
        raise PathError(
            f"workspace {argument!r} could not be resolved inside {root.path}: {exc.strerror or exc}"
        ) from None
    return ResolvedWorkspace(path=inside, source=f"tool argument inside {root.source}")


def is_inside(root: WorkspaceRoot | None, path: Path | str) -> bool:
    if root is None:
        return True
    try:
        return Path(path).resolve().is_relative_to(root.path.resolve())
    except OSError:
        return False
