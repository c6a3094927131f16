"""The host's persistent package caches: one home for the cache folder, size caps and eviction.

The caches live in ``bridge.locations.cache_dir()`` (``$RGBRIDGE_CACHE``, else
``~/.cache/rgbridge``); two are package caches:

* ``wheels/`` (or ``$RGBRIDGE_WHEEL_CACHE``) -- Python wheels, content-addressed: ``wheels/<sha256>/<file name>``. An entry is
  written once (temporary file, then rename) by the host, which computes the hash itself; it is
  re-hashed before use whenever its file changed since it was last verified, and an entry whose
  content no longer matches its name is deleted (then fetched again), never used. Builds see the
  cache through a read-only bind mount of hard links (``WheelCache.view``), so they cannot write
  to it; only the host's own pip (binary wheels, never anything of the agent's) adds to it.
* ``maven-repo/`` -- the Maven local-repository cache (``bridge/scoring/java/mavencache.py``).

Both are size-capped with least-recently-used eviction: ``RGBRIDGE_WHEEL_CACHE_MAX_MB`` and
``RGBRIDGE_MAVEN_CACHE_MAX_MB`` (default ``DEFAULT_MAX_MB`` each; 0 disables the cache's
eviction). Use time is the entry folder's mtime, refreshed whenever a build is given the entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bridge.locations import cache_dir

DEFAULT_MAX_MB = 4096
_SHA = re.compile(r"^[0-9a-f]{64}$")
# A wheel file name (PEP 427): name-version(-build)?-python-abi-platform.whl, one path component.
_WHEEL_NAME = re.compile(r"^[A-Za-z0-9_.+!-]+\.whl$")
_STAMP = ".verified"


def cache_limit_bytes(name: str) -> int:
    """The size cap of cache ``name`` (``RGBRIDGE_<NAME>_CACHE_MAX_MB``); 0 = unlimited."""
    raw = os.environ.get(f"RGBRIDGE_{name.upper()}_CACHE_MAX_MB", "").strip()
    try:
        mb = float(raw) if raw else float(DEFAULT_MAX_MB)
    except ValueError:
        mb = float(DEFAULT_MAX_MB)
    return max(0, int(mb * 1024 * 1024))


def maven_cache_root() -> Path:
    """The Maven local-repository cache (``bridge/scoring/java/mavencache.py`` fills it)."""
    return cache_dir() / "maven-repo"


def maven_version_dirs(root: Path) -> list[Path]:
    """The Maven cache's eviction units: folders that hold files (an artifact version's folder)."""
    out = []
    for folder, _dirs, files in os.walk(root):
        if files and Path(folder) != root:
            out.append(Path(folder))
    return out


def _tree_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _last_use(path: Path) -> float:
    with contextlib.suppress(OSError):
        return path.stat().st_mtime
    return 0.0


def evict_lru(units: Iterable[Path], max_bytes: int) -> list[Path]:
    """Delete the least recently used ``units`` (folders) until their total size is at most
    ``max_bytes``; returns what was deleted. ``max_bytes`` 0 means no cap."""
    if max_bytes <= 0:
        return []
    sized = [(u, _tree_size(u)) for u in units]
    total = sum(size for _, size in sized)
    removed: list[Path] = []
    for unit, size in sorted(sized, key=lambda item: _last_use(item[0])):
        if total <= max_bytes:
            break
        shutil.rmtree(unit, ignore_errors=True)
        total -= size
        removed.append(unit)
    return removed


def touch(path: Path) -> None:
    """Mark a cache unit as just used (its mtime is the LRU clock)."""
    with contextlib.suppress(OSError):
        os.utime(path)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class WheelEntry:
    sha256: str
    path: Path

    @property
    def name(self) -> str:
        return self.path.name


class WheelCache:
    """Content-addressed wheels on the host (see the module docstring)."""

    def __init__(self, root: Path | None = None, max_bytes: int | None = None) -> None:
        if root is None:
            raw = os.environ.get("RGBRIDGE_WHEEL_CACHE", "").strip()
            root = Path(raw).expanduser() if raw else cache_dir() / "wheels"
        self.root = root
        self.max_bytes = cache_limit_bytes("wheel") if max_bytes is None else max_bytes

    # ---------------------------------------------------------------- entries

    def units(self) -> list[Path]:
        """The cache's eviction units (one folder per wheel)."""
        return self._units()

    def _units(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return [p for p in self.root.iterdir() if p.is_dir() and not p.is_symlink() and _SHA.match(p.name)]

    def _stat_key(self, path: Path) -> str:
        st = os.lstat(path)
        return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"

    def verify(self, unit: Path) -> WheelEntry | None:
        """The unit's wheel if its content hashes to the unit's name; otherwise the unit is
        deleted (it will be fetched again) and None returned. A hash is recomputed only when the
        file's size, mtime or inode changed since it last verified."""
        files = [p for p in unit.iterdir() if not p.name.startswith(".")] if unit.is_dir() else []
        wheel = files[0] if len(files) == 1 else None
        ok = (
            wheel is not None
            and wheel.is_file()
            and not wheel.is_symlink()
            and _WHEEL_NAME.match(wheel.name) is not None
        )
        if ok and wheel is not None:
            stamp = unit / _STAMP
            key = self._stat_key(wheel)
            with contextlib.suppress(OSError):
                if stamp.read_text() == key:
                    return WheelEntry(unit.name, wheel)
            if sha256_file(wheel) == unit.name:
                with contextlib.suppress(OSError):
                    stamp.write_text(key)
                return WheelEntry(unit.name, wheel)
        shutil.rmtree(unit, ignore_errors=True)
        return None

    def entries(self) -> list[WheelEntry]:
        """Every verified entry (corrupt ones are deleted on the way)."""
        out = []
        for unit in self._units():
            entry = self.verify(unit)
            if entry is not None:
                out.append(entry)
        return out

    def add(self, src: Path, expected: str | None = None) -> WheelEntry | None:
        """Copy a wheel file into the cache under its own hash; None if it is not a regular
        wheel file or (``expected``) its hash is not that one. An existing entry with the same
        hash is kept (and verified)."""
        if not _WHEEL_NAME.match(src.name):
            return None
        st = os.lstat(src)
        if not os.path.isfile(src) or os.path.islink(src) or st.st_size == 0:
            return None
        self.root.mkdir(parents=True, exist_ok=True)
        tmp_dir = self.root / f".incoming-{secrets.token_hex(6)}"
        tmp_dir.mkdir()
        try:
            h = hashlib.sha256()
            dest = tmp_dir / src.name
            fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fin, open(dest, "wb") as fout:
                for block in iter(lambda: fin.read(1 << 20), b""):
                    h.update(block)
                    fout.write(block)
            digest = h.hexdigest()
            if expected is not None and digest != expected:
                return None
            final = self.root / digest
            if final.is_dir():
                existing = self.verify(final)
                if existing is not None:
                    touch(final)
                    return existing
            with contextlib.suppress(OSError):
                os.rename(tmp_dir, final)
            entry = self.verify(final)
            if entry is not None:
                touch(final)
            return entry
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)

    def import_dir(self, folder: Path, expected: dict[str, str] | None = None) -> int:
        """Add the wheels directly inside ``folder`` (``expected``: only those named there, with
        that sha256); returns how many were new."""
        known = {u.name for u in self._units()}
        added = 0
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            if expected is not None and path.name not in expected:
                continue
            entry = self.add(path, None if expected is None else expected[path.name])
            if entry is not None and entry.sha256 not in known:
                known.add(entry.sha256)
                added += 1
        return added

    def missing(self, pins: Iterable[str]) -> list[str]:
        """The ``name==version`` pins no cached wheel provides."""
        have = {(project_of(e.name), e.name.split("-")[1].lower()) for e in self.entries()}
        out = []
        for pin in pins:
            name, _, version = pin.partition("==")
            if (re.sub(r"[-_.]+", "-", name).lower(), version.lower()) not in have:
                out.append(pin)
        return out

    def evict(self) -> list[Path]:
        return evict_lru(self._units(), self.max_bytes)

    # ---------------------------------------------------------------- views for builds

    @contextlib.contextmanager
    def view(self) -> Iterator[Path]:
        """A folder for a read-only bind mount, deleted afterwards: ``flat/`` holds hard links
        to every verified wheel (pip's ``--find-links`` layout) and ``simple/<project>/`` an
        index page per project (PEP 503) whose links carry the wheel's sha256, so pip checks
        each file again before installing it."""
        views = self.root.parent / "wheel-views"
        views.mkdir(parents=True, exist_ok=True)
        for stale in views.iterdir():  # views of builds that died (older than a day)
            if time.time() - _last_use(stale) > 86400:
                shutil.rmtree(stale, ignore_errors=True)
        folder = views / secrets.token_hex(8)
        (folder / "flat").mkdir(parents=True)
        (folder / "simple").mkdir()
        try:
            pages: dict[str, list[str]] = {}
            for entry in self.entries():
                dest = folder / "flat" / entry.name
                if dest.exists():
                    continue  # two files with one name: the first verified one wins
                try:
                    os.link(entry.path, dest)
                except OSError:
                    try:
                        shutil.copyfile(entry.path, dest)
                    except FileNotFoundError:
                        continue  # evicted meanwhile (another build trimmed the cache): not offered
                link = f'<a href="../../flat/{entry.name}#sha256={entry.sha256}">{entry.name}</a>'
                pages.setdefault(project_of(entry.name), []).append(link)
            for project, links in pages.items():
                (folder / "simple" / project).mkdir()
                (folder / "simple" / project / "index.html").write_text(
                    "<!DOCTYPE html><html><body>\n" + "<br>\n".join(sorted(links)) + "\n</body></html>\n"
                )
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def project_of(wheel_name: str) -> str:
    """The normalised project name (PEP 503) of a wheel file name."""
    return re.sub(r"[-_.]+", "-", wheel_name.split("-", 1)[0]).lower()
