"""One protocol for where a dependency set is kept: a layer or a volume, both handing back a DepsImage.

The layer store (``layer.py``: the set is an image layer) and the volume store (``volume_store.py``:
the set is a Docker volume the sandboxes mount) both answer ``ready`` (the finished set, if on
disk) and ``build`` (make it from a ``DepSet`` with the wheels of an ``InstallSource``) behind
``DepStore``, and both hand back a ``DepsImage``, the ready set the profiles score with.
``deps.ensure`` is the one flow over either store (lease, build lock, disk budget, wheel source);
this module holds no code that touches the engine."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bridge.scoring.images.base import BuildResult, DependencyInstallError
from bridge.scoring.types import ProgressFn


@dataclass(frozen=True)
class EnvVolume:
    """A volume holding a dependency environment, and where sandboxes mount it (read-only)."""

    name: str
    path: str


class PendingCheck(Protocol):
    """A set handed out while pip's check of it still runs: ``settle`` waits for pip's verdict,
    then keeps the set (True) or removes it (False); idempotent (``volume_store.VolumePendingCheck``)."""

    log_tail: str

    def settle(self) -> bool: ...


@dataclass(frozen=True)
class DepsImage:
    """A ready dependency set: the image to run, and the volume to mount when the set is one."""

    tag: str
    cached: bool
    seconds: float
    log_tail: str = ""
    #: what the build installed that the package cache lacked (the host then fetched it)
    uncached: tuple[str, ...] = ()
    #: the environment's volume, mounted read-only at its path by the sandboxes (``env_volume``)
    volume: EnvVolume | None = None
    #: pip's check of a uv install, still running (``allow_pending_check``); see ``settle``
    pending_check: PendingCheck | None = None

    @property
    def mounts(self) -> dict[str, str]:
        """Volume name -> path for ``SandboxSpec.volumes``."""
        return {self.volume.name: self.volume.path} if self.volume is not None else {}

    def settle(self) -> bool:
        """Settle the set's pending check (wait for pip's verdict): True = accepted (the set is
        kept), False = rejected (the set is gone; score again with ``installer="pip"``). True
        when no check is pending. Callers of ``allow_pending_check`` must call it, also when
        their score fails."""
        return self.pending_check.settle() if self.pending_check is not None else True

    def build_log(self) -> str:
        """The build's log tail, pip's check included once ``settle`` returned."""
        return (self.pending_check.log_tail if self.pending_check is not None else "") or self.log_tail


@dataclass(frozen=True)
class DepSet:
    """What is asked: ``files`` (normalised requirements, then extras) installed in turn into
    ``base``'s active environment; ``tag`` is the set's key (``deps.deps_image_tag``) and
    ``scope`` what the key holds besides the files (recipe, base, wheel source)."""

    base: str
    tag: str
    files: dict[str, str]
    scope: str = ""


@dataclass
class InstallSource:
    """Where the wheels come from and how the build installs (``assets/install_set.sh``)."""

    mode: str
    view: Path
    wheels: Path | None
    timeout: float
    progress: ProgressFn | None = None
    #: gets the installed ``name==version`` pins as soon as the environment is final
    on_installed: Callable[[list[str]], None] | None = None
    allow_pending_check: bool = False
    #: waits until the wheels the host fetches after the build (``on_installed``) are cached
    cached: Callable[[], object] | None = None


class DepStore(Protocol):
    """Where sets of one kind are kept. The caller (``deps.ensure``) holds the set's build lock
    around ``build`` and made room for it in the disk budget first."""

    #: the set's kind in the disk budget (``budget.make_room``)
    budget_kind: str

    def books_name(self, tag: str) -> str:
        """The set's name in the disk books (``usage.lease``)."""
        ...

    def ready(self, tag: str) -> DepsImage | None:
        """The finished set when it is on disk (a half-removed one is dropped: None)."""
        ...

    def build(self, want: DepSet, source: InstallSource, lock: ExitStack) -> DepsImage:
        """Make the set; raises DependencyInstallError. ``lock`` holds the build lock: a store
        that hands the set out before it is final takes it over (``lock.pop_all()``)."""
        ...


def last_error_line(log: str) -> str:
    lines = [x.strip() for x in log.splitlines() if x.strip()]
    for line in reversed(lines):
        if line.startswith("ERROR:") or "error:" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else "no output"


def raise_unless_ok(res: BuildResult, timeout: float) -> None:
    """A failed build as the DependencyInstallError the profiles report."""
    if res.ok:
        return
    if res.timed_out:
        msg = f"dependency install timed out after {timeout:.0f}s"
    else:
        msg = f"dependency install failed: {last_error_line(res.log_tail)}"
    raise DependencyInstallError(msg, log_tail=res.log_tail, timed_out=res.timed_out)
