"""Memory and process limits of one attempt: a cgroup of its own (v2, else v1's memory and pids
hierarchies) nested under this process's cgroup, or, where no cgroup is writable (an
unprivileged user without a delegated cgroup), a watch that counts the sandbox's processes and
their resident memory in its PID namespace every half second.

The cgroup is the kernel's enforcement (a fork past `pids` fails, the OOM killer acts past
`memory_bytes`); its event counters say afterwards which one acted. The watch is a fallback that
ends the attempt once it sees the limit passed: a burst faster than its period goes past it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bridge.agents.confine.model import Limits
from bridge.fs.files import pid_alive

PREFIX = "rgbridge-"  # rgbridge-<pid of the bridge>-<random>
WATCH_PERIOD = 0.5
KILL_ROUNDS = 200


class Meter(Protocol):
    """What enforces and reports the memory and pids limits of one running attempt."""

    kind: str  # "cgroup2" | "cgroup1" | "watch"

    def limit_hit(self) -> str | None: ...
    def pids(self) -> list[int]: ...
    def close(self) -> None: ...


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""


def _counter(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value.strip())
    return 0


def _field(text: str, key: str) -> int:
    """`Key:   123 kB` in /proc's status-like files: the number."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == key and value.split() and value.split()[0].isdigit():
            return int(value.split()[0])
    return 0


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fs type, super options) of this process's mounts."""
    found = []
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            found.append((fields[3], fields[4], tail[0], tail[2]))
    return found


def _own_cgroups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    own: dict[str, str] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(",") if parts[1] else [""]:
                own[name] = parts[2]
    return own


def _locate(root: str, point: str, own: str) -> Path | None:
    """Our cgroup's folder in a hierarchy mounted at `point` (whose root is `root`)."""
    if own != root and not own.startswith(root.rstrip("/") + "/"):
        return None
    inner = own[len(root) :].lstrip("/") if root != "/" else own.lstrip("/")
    return Path(point) / inner


def kill_until_empty(pids: Callable[[], list[int]]) -> None:
    """SIGKILL what `pids()` lists until it lists nothing (a fork racing the kill is caught by
    the next round; the pids limit bounds how many there can be)."""
    for _ in range(KILL_ROUNDS):
        left = pids()
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


@dataclass
class Cgroup:
    """One attempt's cgroup: `dirs` are its folders (one on v2; memory and pids on v1)."""

    kind: str
    dirs: dict[str, Path]
    limits: Limits
    memory_events: Path
    memory_key: str
    pids_events: Path

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs.values()]

    def limit_hit(self) -> str | None:
        return counted_hit((self.memory_events, self.memory_key, self.pids_events))

    def pids(self) -> list[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            found.update(int(x) for x in _read(procs).split() if x.isdigit())
        return sorted(found)

    def kill_all(self) -> None:
        kill = next(iter(self.dirs.values())) / "cgroup.kill"
        if self.kind == "cgroup2" and kill.exists():
            with contextlib.suppress(OSError):
                kill.write_text("1", encoding="ascii")
        kill_until_empty(self.pids)

    def close(self) -> None:
        """Kill what is left and remove the folders."""
        self.kill_all()
        for folder in self.dirs.values():
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def _write(path: Path, value: str) -> None:
    path.write_text(value, encoding="ascii")


def _make_v2(name: str, limits: Limits) -> Cgroup | None:
    point = next((p for r, p, t, _ in _mounts() if t == "cgroup2"), None)
    own = _own_cgroups().get("")
    root = next((r for r, p, t, _ in _mounts() if t == "cgroup2"), "/")
    base = _locate(root, point, own) if point and own is not None else None
    if base is None or not {"memory", "pids"} <= set(_read(base / "cgroup.controllers").split()):
        return None
    enabled = set(_read(base / "cgroup.subtree_control").split())
    try:
        if not {"memory", "pids"} <= enabled:
            # refused (EBUSY) when our own cgroup holds processes and is not the root
            _write(base / "cgroup.subtree_control", "+memory +pids")
        folder = base / name
        folder.mkdir()
    except OSError:
        return None
    try:
        _write(folder / "memory.max", str(limits.memory_bytes))
        if (folder / "memory.swap.max").exists():
            _write(folder / "memory.swap.max", "0")
        _write(folder / "pids.max", str(limits.pids))
    except OSError:
        with contextlib.suppress(OSError):
            folder.rmdir()
        return None
    return Cgroup("cgroup2", {"": folder}, limits, folder / "memory.events", "oom_kill", folder / "pids.events")


def _make_v1(name: str, limits: Limits) -> Cgroup | None:
    own = _own_cgroups()
    dirs: dict[str, Path] = {}
    for controller in ("memory", "pids"):
        mount = next(((r, p) for r, p, t, opts in _mounts() if t == "cgroup" and controller in opts.split(",")), None)
        if mount is None or controller not in own:
            return None
        base = _locate(mount[0], mount[1], own[controller])
        if base is None:
            return None
        dirs[controller] = base / name
    made: list[Path] = []
    try:
        for folder in dirs.values():
            folder.mkdir()
            made.append(folder)
        memory, pids = dirs["memory"], dirs["pids"]
        _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
        if (memory / "memory.memsw.limit_in_bytes").exists():  # no swap beyond the limit
            with contextlib.suppress(OSError):
                _write(memory / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        _write(pids / "pids.max", str(limits.pids))
    except OSError:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        return None
    return Cgroup(
        "cgroup1", dirs, limits, dirs["memory"] / "memory.oom_control", "oom_kill", dirs["pids"] / "pids.events"
    )


def make_cgroup(limits: Limits) -> Cgroup | None:
    """A fresh cgroup for one attempt with its limits set, or None where none can be made."""
    name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    made = _make_v2(name, limits) or _make_v1(name, limits)
    if made is not None:
        for folder in made.dirs.values():
            _sweep_beside(folder)
    return made


def _sweep_beside(folder: Path) -> None:
    """Empty cgroups of bridge processes that died without removing theirs (killed -9)."""
    try:
        siblings = list(folder.parent.iterdir())
    except OSError:
        return
    for other in siblings:
        owner = other.name.removeprefix(PREFIX).split("-")[0]
        if other.name.startswith(PREFIX) and owner.isdigit() and not pid_alive(int(owner)):
            with contextlib.suppress(OSError):  # EBUSY: processes still in it, left alone
                other.rmdir()


def counters_of(pid: int) -> tuple[Path, str, Path] | None:
    """(memory events file, its OOM key, pids events file) of the cgroup `pid` is in, when this
    process sees it (a container's init, say, on an engine of the same machine)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    paths: dict[str, str] = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(",") if parts[1] else [""]:
                paths[name] = parts[2]
    mounts = _mounts()
    if "memory" in paths and "pids" in paths:
        folders = {}
        for controller in ("memory", "pids"):
            mount = next(((r, p) for r, p, t, o in mounts if t == "cgroup" and controller in o.split(",")), None)
            folder = _locate(mount[0], mount[1], paths[controller]) if mount else None
            if folder is None:
                return None
            folders[controller] = folder
        return folders["memory"] / "memory.oom_control", "oom_kill", folders["pids"] / "pids.events"
    mount2 = next(((r, p) for r, p, t, _ in mounts if t == "cgroup2"), None)
    folder = _locate(mount2[0], mount2[1], paths[""]) if mount2 and "" in paths else None
    if folder is None or not (folder / "pids.events").exists():
        return None
    return folder / "memory.events", "oom_kill", folder / "pids.events"


def counted_hit(counters: tuple[Path, str, Path]) -> str | None:
    memory, key, pids = counters
    if _counter(_read(memory), key) > 0:
        return "memory"
    if _counter(_read(pids), "max") > 0:
        return "pids"
    return None


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


@dataclass
class NamespaceWatch:
    """The fallback: the processes whose PID namespace is the sandbox's, counted (threads
    included, as the pids controller counts) and their memory summed (proportional set size:
    pages shared between forked processes count once in total, as the memory controller counts)."""

    namespace: str
    limits: Limits
    kind: str = "watch"
    _last: float = 0.0
    _hit: str | None = None

    def pids(self) -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and pid_namespace(int(entry)) == self.namespace:
                found.append(int(entry))
        return found

    def limit_hit(self) -> str | None:
        now = time.monotonic()
        if self._hit is not None or now - self._last < WATCH_PERIOD:
            return self._hit
        self._last = now
        tasks = memory = 0
        for pid in self.pids():
            tasks += _field(_read(Path(f"/proc/{pid}/status")), "Threads") or 1
            memory += _field(_read(Path(f"/proc/{pid}/smaps_rollup")), "Pss") * 1024  # kB
        if tasks >= self.limits.pids:
            self._hit = "pids"
        elif memory > self.limits.memory_bytes:
            self._hit = "memory"
        return self._hit

    def close(self) -> None:
        kill_until_empty(self.pids)
