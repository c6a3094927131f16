"""The one validator for relative paths taken from untrusted input (recordings, archives, MCP
arguments, container listings), and the layout check for a set of them.

A name is accepted only if it can be written under any root on Linux without surprises: no
absolute path or drive letter, no `..`, `.` or empty component, no NUL or backslash, every
component at most NAME_MAX bytes and the whole within MAX_REL_PATH_BYTES (PATH_MAX leaves room
for the root). Names are str with non-UTF-8 bytes as lone surrogates (PEP 383), so lengths are
counted on the bytes the file system sees.
"""

from __future__ import annotations

from collections.abc import Iterable

from bridge.errors import BridgeError, PathError

NAME_MAX = 255
#: walks do not enter a folder whose relative path is longer than this (PATH_MAX is 4096 with the root)
MAX_DIR_PATH_BYTES = 3000
#: the longest relative path a walk can record: such a folder plus one name
MAX_REL_PATH_BYTES = MAX_DIR_PATH_BYTES + 1 + NAME_MAX


def fs_bytes(name: str) -> bytes:
    """The bytes the file system sees for a name (surrogates back to their raw bytes)."""
    return name.encode("utf-8", "surrogateescape")


def rel_parts(name: str, *, what: str = "path", error: type[BridgeError] = PathError) -> list[str]:
    """Components of a clean relative POSIX path, or `error` with a one-line reason."""
    if not isinstance(name, str) or not name:
        raise error(f"{what} {name!r}: empty or not a string")
    if "\0" in name or "\\" in name:
        raise error(f"{what} {name!r}: invalid name (NUL or backslash)")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise error(f"{what} {name!r}: absolute path refused")
    parts = name.split("/")
    if any(p == ".." for p in parts):
        raise error(f"{what} {name!r}: '..' in path refused")
    if any(p in ("", ".") for p in parts):
        raise error(f"{what} {name!r}: empty or '.' path component refused")
    try:
        raw = [fs_bytes(p) for p in parts]
    except UnicodeEncodeError:
        raise error(f"{what} {name!r}: not representable as a file name") from None
    long = next((p for p, b in zip(parts, raw, strict=True) if len(b) > NAME_MAX), None)
    if long is not None:
        raise error(f"{what} {name[:80]!r}…: a component is longer than {NAME_MAX} bytes")
    if sum(len(b) for b in raw) + len(raw) - 1 > MAX_REL_PATH_BYTES:
        raise error(f"{what} {name[:80]!r}…: longer than {MAX_REL_PATH_BYTES} bytes")
    return parts


def check_layout(
    files: Iterable[str], dirs: Iterable[str] = (), *, what: str = "path", error: type[BridgeError] = PathError
) -> None:
    """Refuse a set of paths that cannot coexist in one tree: a name that is both a file and a
    folder (`a` and `a/b`), or the same file twice."""
    seen: set[str] = set()
    for rel in files:
        if rel in seen:
            raise error(f"{what} {rel!r}: appears twice")
        seen.add(rel)
    folders = set(dirs)
    for rel in seen:
        parts = rel.split("/")
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
    clash = sorted(seen & folders)
    if clash:
        raise error(f"{what} {clash[0]!r}: is both a file and a folder")
