"""The allow-list of one attempt, as a plan every sandbox kind carries out the same way.

Bound read-only: the system's folders (/usr and the /lib*, /bin, /sbin links), the few /etc files
programs need to resolve names, verify certificates and know users and time, the CLI and what it
needs, every `--agent-bind` path. Bound read-write at their host paths: the workspace, the
attempt's HOME and TMPDIR. Fresh: /tmp (tmpfs), /dev, /proc (its own PID namespace). Nothing else
exists inside. Then, as a second line: every protected path that lies under a bound one is masked
(an empty read-only tmpfs for a folder, /dev/null for a file or socket), and a bind that IS a
protected path is refused. A bind inside a protected folder shows that bind only (the workspace
lives in the run folder, which stays hidden).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bridge.agents.confine.model import Confinement, SandboxError
from bridge.agents.confine.network import Door, isolated

#: system folders: bound read-only, or recreated as the same symlink (merged /usr)
SYSTEM_DIRS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")
#: /etc entries the CLIs need (TLS roots, name resolution, users, time zone, the loader's cache,
#: Debian's alternatives that /usr/bin links go through); those missing here are skipped
ETC_FILES = (
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/os-release",
    "/etc/mime.types",
)
#: the Docker engine's sockets: always protected (the engine can mount any host path)
DOCKER_SOCKETS = (Path("/var/run/docker.sock"), Path("/run/docker.sock"))


@dataclass(frozen=True)
class Mask:
    path: Path  # where it appears inside the sandbox
    is_dir: bool


@dataclass(frozen=True)
class BindPlan:
    """What one attempt's sandbox mounts; `ordered()` gives the mount order."""

    system: tuple[str, ...]  # present system dirs (bound ro or linked)
    etc: tuple[str, ...]  # present /etc entries (bound ro)
    read_only: tuple[Path, ...]
    read_write: tuple[Path, ...]
    masks: tuple[Mask, ...]
    network: str = "host"  # "closed" | "allow": its own network namespace, reaching only `doors`
    doors: tuple[Door, ...] = ()

    @property
    def isolated(self) -> bool:
        return isolated(self.network)

    def ordered(self) -> list[tuple[Path, str]]:
        """(path, "ro" | "rw" | "mask_dir" | "mask_file") for every bind and mask, parents
        before children: a bind inside a masked folder (the workspace inside a masked run
        folder) is mounted after the mask, so the mask never hides it."""
        ops = [(p, "ro") for p in self.read_only] + [(p, "rw") for p in self.read_write]
        ops += [(m.path, "mask_dir" if m.is_dir else "mask_file") for m in self.masks]
        return sorted(ops, key=lambda item: (len(item[0].parts), str(item[0])))

    def as_dict(self, *, system: bool = True) -> dict[str, list[str]]:
        """For the recording; `system=False` where the system folders are not the host's (Docker)."""
        return {
            "ro": [*(self.system + self.etc if system else ()), *(str(p) for p in self.read_only)],
            "rw": [str(p) for p in self.read_write],
            "masked": [str(m.path) for m in self.masks],
        }

    def network_dict(self) -> dict[str, object]:
        """For the recording: the mode and the doors (name, port) the sandbox could reach."""
        return {"mode": self.network, "doors": [{"name": d.name, "port": d.port} for d in self.doors]}


def _forms(path: Path) -> set[Path]:
    """A path as named (absolute) and as resolved: a mask must match either spelling."""
    named = Path(os.path.abspath(path))
    return {named, named.resolve()}


def _dedupe(paths: list[Path]) -> tuple[Path, ...]:
    seen: list[Path] = []
    for path in paths:
        named = Path(os.path.abspath(path))
        if named not in seen:
            seen.append(named)
    return tuple(seen)


def present(entries: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(e for e in entries if os.path.lexists(e))


def protected_defaults() -> tuple[Path, ...]:
    """What the bridge itself must keep from every agent: the shipped tasks, its data home
    (recordings, result store), its caches and the Docker sockets."""
    from bridge import locations

    found: list[Path] = list(DOCKER_SOCKETS)
    try:
        found.append(locations.shipped_tasks_dir())
    except RuntimeError:  # an install without its tasks has none to protect
        pass
    found += [locations.data_home(), locations.default_recordings_dir(), locations.cache_dir()]
    return tuple(found)


def plan(confinement: Confinement) -> BindPlan:
    """The binds and masks for `confinement`; SandboxError when a bind is itself protected."""
    for path in confinement.read_write:
        if not path.is_dir():
            raise SandboxError(f"{path}: the attempt's folder does not exist")
    read_write = _dedupe(list(confinement.read_write))
    read_only = tuple(
        p for p in _dedupe([p for p in confinement.read_only if os.path.lexists(p)]) if p not in read_write
    )
    protected = [*confinement.protected, *DOCKER_SOCKETS]
    binds = [*read_only, *read_write]
    system_binds = [Path(d) for d in present(SYSTEM_DIRS)] + [Path(e) for e in present(ETC_FILES)]
    for bind in read_only:
        # a read-only bind inside a protected folder (a golden test file named in an --agent-cmd,
        # an --agent-bind of a task's tests/) would show what the folder hides; only the
        # attempt's own read-write folders live inside one (the run folder)
        for b in _forms(bind):
            for prot in protected:
                if any(p in b.parents for p in _forms(prot)):
                    raise SandboxError(f"{bind}: inside {prot}, which the bridge keeps from agents; do not bind it")
    masks: dict[Path, Mask] = {}
    for prot in protected:
        prot_forms = _forms(prot)
        for bind in [*binds, *system_binds]:
            bind_forms = _forms(bind)
            for b in bind_forms:
                for p in prot_forms:
                    if p == b:
                        raise SandboxError(f"{bind}: protected (the bridge keeps it from agents); do not bind it")
                    if b in p.parents:
                        # the mask goes where the protected path appears inside: under the bind's
                        # destination, which is the path as named
                        inside = Path(os.path.abspath(bind)) / p.relative_to(b)
                        if os.path.lexists(p):
                            masks[inside] = Mask(inside, p.is_dir() and not p.is_symlink())
    return BindPlan(
        system=present(SYSTEM_DIRS),
        etc=present(ETC_FILES),
        read_only=read_only,
        read_write=read_write,
        masks=tuple(sorted(masks.values(), key=lambda m: (len(m.path.parts), str(m.path)))),
        network=confinement.network,
        doors=confinement.doors if isolated(confinement.network) else (),
    )
