"""What a program needs bound read-only to run in a sandbox, beyond the system's own folders.

Only what the program's own path leads to: the file itself, every symlink on the way to it, the
install tree a `bin/` folder belongs to when it is one the program runs from (an interpreter's
prefix, a virtual environment and its base, a Python package that ships its binary in `bin/`
next to its resources) and, for a script, its `#!` interpreter. Nothing the user did not name
is added beyond that: a binary in `~/.local/bin` brings the file alone, never `~/.local`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from bridge.agents.confine.model import SandboxError

#: bound in every sandbox already (bridge/agents/confine/binds.py): nothing under them is repeated
SYSTEM_PREFIXES = (
    Path("/usr"),
    Path("/lib"),
    Path("/lib32"),
    Path("/lib64"),
    Path("/libx32"),
    Path("/bin"),
    Path("/sbin"),
)
MAX_HOPS = 16  # symlinks followed (the kernel's own limit is 40) and shebang levels


def _abs(path: Path) -> Path:
    """Absolute, `..` folded, symlinks kept (each hop is resolved on its own)."""
    return Path(os.path.abspath(path))


def _hops(path: Path) -> list[Path]:
    """The path as named, then every symlink target on the way to the file, ending at the file."""
    hops = [_abs(path)]
    current = hops[0]
    for _ in range(MAX_HOPS):
        # a symlinked parent folder counts as a hop of its own (the file is reached through it)
        real_parent = current.parent.resolve()
        if real_parent != current.parent:
            current = real_parent / current.name
            hops.append(current)
        if not current.is_symlink():
            break
        target = Path(os.readlink(current))
        current = _abs(current.parent / target)
        hops.append(current)
    return hops


def is_system(path: Path) -> bool:
    return any(path == p or p in path.parents for p in SYSTEM_PREFIXES)


def _install_tree(binary: Path) -> Path | None:
    """`<prefix>` for `<prefix>/bin/<name>` when the prefix is an install tree the program runs
    from: a virtual environment (`pyvenv.cfg`), a Python package shipping its binary in `bin/`
    (`__init__.py`), an interpreter's own prefix (`python3`, `node` with its `lib/python*` or
    `lib/node_modules`). Any other `bin/` (`~/.local/bin`, say) brings the file alone."""
    if binary.parent.name != "bin":
        return None
    prefix = binary.parent.parent
    if prefix in (Path("/"), Path.home()) or str(prefix) in ("/root", "/home"):
        return None
    if (prefix / "pyvenv.cfg").is_file() or (prefix / "__init__.py").is_file():
        return prefix
    name = binary.name
    if name.startswith(("python", "pypy")) and any((prefix / "lib").glob("py*")):
        return prefix
    if name == "node" and (prefix / "lib" / "node_modules").is_dir():
        return prefix
    return None


def _venv_base(prefix: Path) -> Path | None:
    """The base interpreter's prefix a virtual environment was made from (`home = <base>/bin`)."""
    try:
        lines = (prefix / "pyvenv.cfg").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            home = Path(value.strip())
            return home.parent if home.name == "bin" else home
    return None


def _shebang(path: Path, search_path: str | None) -> Path | None:
    """The interpreter a script's `#!` line names (`/usr/bin/env NAME` looked up on PATH)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        found = shutil.which(names[0], path=search_path) if names else None
        return Path(found) if found else None
    return Path(words[0])


def needs_of(binary: Path, *, search_path: str | None = None, _depth: int = 0) -> tuple[Path, ...]:
    """What `binary` (a CLI, an interpreter, a script) needs bound read-only, system folders
    left out (they are always bound). Raises SandboxError when the program does not exist."""
    named = Path(binary)
    if not named.is_absolute() and named.parent == Path("."):
        found = shutil.which(str(named), path=search_path)
        if found is None:
            raise SandboxError(f"{binary}: not found on PATH")
        named = Path(found)
    if not named.exists():
        raise SandboxError(f"{binary}: no such file")
    needs: list[Path] = []
    for hop in _hops(named):
        needs.append(hop)
        tree = _install_tree(hop)
        if tree is not None:
            needs.append(tree)
            base = _venv_base(tree)
            if base is not None and base.is_dir():
                needs.append(base)
    real = named.resolve()
    interpreter = _shebang(real, search_path) if _depth < MAX_HOPS else None
    if interpreter is not None and interpreter.exists():
        needs.extend(needs_of(interpreter, search_path=search_path, _depth=_depth + 1))
    return minimal(p for p in needs if not is_system(p))


def needs_of_template(words: list[str], *, search_path: str | None = None) -> tuple[Path, ...]:
    """For the `command` adapter: the program its template names and what it needs, plus every
    existing absolute path the template's words name (`python3 /path/agent.py` binds the script)."""
    if not words:
        return ()
    needs = list(needs_of(Path(words[0]), search_path=search_path))
    for word in words[1:]:
        if word.startswith("/") and "{" not in word and Path(word).exists():
            path = _abs(Path(word))
            needs.append(path)
            if path.is_file() and os.access(path, os.X_OK):
                # a program the template runs through another (`env VAR=1 /venv/bin/python ...`,
                # `timeout 60 /opt/agent`): it needs what it needs as the first word would
                needs.extend(needs_of(path, search_path=search_path))
            elif path.is_file():
                interpreter = _shebang(path.resolve(), search_path)
                if interpreter is not None and interpreter.exists():
                    needs.extend(needs_of(interpreter, search_path=search_path))
    return minimal(p for p in needs if not is_system(p))


def minimal(paths: Iterable[Path]) -> tuple[Path, ...]:
    """Sorted, duplicates and paths inside another one left out."""
    unique = sorted({Path(p) for p in paths})
    kept: list[Path] = []
    for path in unique:
        if not any(k == path or k in path.parents for k in kept):
            kept.append(path)
    return tuple(kept)
