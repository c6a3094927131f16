"""Requirement files: normal form (what a dependency layer is keyed by) and what may be fetched.

pip reads a requirements file line by line: a trailing backslash continues a line, ``#`` starts
a comment at the start of a line or after whitespace, and the requirements found are resolved
together, so their order does not change what gets installed. ``normalise`` keeps exactly
that meaning and drops the rest (comments, blank lines, order, repeated lines, runs of
whitespace), so equivalent files share one layer.

Agent-supplied requirements are untrusted. ``local_path_reason`` names a line that would install
from a folder or file on the machine doing the install (the dependency layer is built from the
requirements text alone, so such a line can only fail there, and on the host it would run the
agent's ``setup.py``). ``host_fetch_reason`` is stricter, for the host-side wheelhouse: only
named requirements (PEP 508, no URL) with optional ``--hash`` options, fetched as binary wheels.
"""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement

_COMMENT = re.compile(r"(^|\s+)#.*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_VCS = re.compile(r"^(git|hg|svn|bzr)\+", re.IGNORECASE)
_ARCHIVE = re.compile(r"\.(whl|zip|tar\.gz|tgz|tar\.bz2|tbz|tar\.xz|txz|tar)$", re.IGNORECASE)
_HASH_OPT = re.compile(r"^--hash[= ]\S+$")


def logical_lines(text: str) -> list[str]:
    """pip's logical lines: continuations joined, comments and blank lines gone, whitespace
    runs collapsed to one space."""
    physical = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    pending = ""
    for raw in physical:
        line = _COMMENT.sub("", raw)
        if line.endswith("\\"):
            pending += line[:-1]  # pip joins continued lines as they are
            continue
        line = " ".join((pending + line).split())
        pending = ""
        if line:
            out.append(line)
    tail = " ".join(pending.split())
    if tail:
        out.append(tail)
    return out


def normalise(text: str) -> str:
    """Sorted unique logical lines, one per line ("" when there are none)."""
    lines = sorted(dict.fromkeys(logical_lines(text)))
    return "\n".join(lines) + "\n" if lines else ""


def _looks_like_path(spec: str) -> bool:
    spec = spec.strip().strip("'\"")
    if not spec:
        return False
    if spec.lower().startswith("file:"):
        return True
    if _SCHEME.match(spec) or _VCS.match(spec):
        return False
    if spec.startswith((".", "/", "~", "\\")) or "/" in spec or "\\" in spec:
        return True
    return _ARCHIVE.search(spec) is not None


def local_path_reason(line: str) -> str | None:
    """Why this logical line installs from a local path (folder, archive, ``file:`` URL, an
    editable or ``-r``/``-c`` include), or None."""
    head, _, rest = line.partition(" ")
    if head in ("-e", "--editable", "-r", "--requirement", "-c", "--constraint"):
        target = rest.strip()
        if head.startswith(("-r", "--r", "-c", "--c")) or _looks_like_path(target):
            return f"'{line}' installs from a local path ({target or 'missing'})"
        return None
    for opt in ("--editable=", "--requirement=", "--constraint=", "-e", "-r", "-c"):
        if head.startswith(opt) and head != opt:
            return f"'{line}' installs from a local path ({head[len(opt) :].lstrip('=')})"
    if head.startswith("-"):
        return None
    spec = line.split(" --", 1)[0].split(";", 1)[0].strip()
    if "@" in spec and not spec.startswith("@"):
        url = spec.split("@", 1)[1].strip()
        if url.lower().startswith("file:"):
            return f"'{line}' installs from a local path ({url})"
        return None
    if _looks_like_path(spec):
        return f"'{line}' installs from a local path ({spec})"
    return None


def host_fetch_reason(line: str) -> str | None:
    """Why this logical line may not be fetched on the host (binary wheels of named
    requirements only), or None."""
    local = local_path_reason(line)
    if local is not None:
        return local
    parts = line.split(" --")
    spec, options = parts[0].strip(), ["--" + p.strip() for p in parts[1:]]
    if spec.startswith("-"):
        return f"'{line}': pip options are not accepted in wheelhouse mode"
    if any(not _HASH_OPT.match(opt) for opt in options):
        return f"'{line}': only --hash options are accepted in wheelhouse mode"
    try:
        req = Requirement(spec)
    except InvalidRequirement:
        return f"'{line}' is not a named requirement (PEP 508)"
    if req.url:
        return f"'{line}' installs from a URL; wheelhouse mode fetches named packages only"
    return None
