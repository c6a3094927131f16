"""The volume store: dependency sets kept in volumes, handed out while their pip check is pending.

The volume store (``store.DepStore`` for sets kept in volumes, ``env_volume.py``): a finished
set is the base tagged ``rgbridge-deps:<key>`` plus its volume; a set whose pip check is still
running is handed out with its pending check (``VolumePendingCheck``); a never-seen set may start from the closest
finished one (``closest.py``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Protocol

import docker
from docker.errors import DockerException

from bridge.scoring.images.base import image_exists, volume_exists
from bridge.scoring.images.disk import hold
from bridge.scoring.images.sets.closest import find_closest, merged_pins, remember
from bridge.scoring.images.sets.env_volume import (
    build_in_volume,
    fill_bytecode,
    mark_complete,
    remove_volume,
    volume_for,
)
from bridge.scoring.images.sets.store import (
    DepSet,
    DepsImage,
    EnvVolume,
    InstallSource,
    PendingCheck,
    raise_unless_ok,
)
from bridge.scoring.images.sets.twin import TwinBuilt, TwinOffer, withdraw


class Verdict(Protocol):
    """pip's check of a set left running: its build container's (``CheckContainer``) or, for a
    twin, its maker's (``twin.TwinCheck``)."""

    def verdict(self) -> tuple[bool, str]: ...


class VolumePendingCheck:
    """A set's pending check in the volume store (``store.PendingCheck``): ``settle`` takes pip's
    verdict, then the tag (accepted) or the volume's removal (rejected), then releases the build
    lock. ``settle`` is idempotent. ``twin``: the pending check of the set this build made as
    its twin, settled after this one's (whoever else was to settle it); ``on_settle`` runs
    once the verdict is in, whatever it is."""

    def __init__(
        self,
        client: docker.DockerClient,
        check: Verdict,
        *,
        base: str,
        tag: str,
        volume: EnvVolume,
        lock: contextlib.ExitStack,
        on_accept: Callable[[], None] | None = None,
        twin: PendingCheck | None = None,
        on_settle: Callable[[], None] | None = None,
    ) -> None:
        self._client, self._check, self._base, self._tag, self._volume = client, check, base, tag, volume
        self._lock, self._on_accept, self._twin, self._on_settle = lock, on_accept, twin, on_settle
        self._guard = threading.Lock()
        self._verdict: bool | None = None
        self.log_tail = ""

    def settle(self) -> bool:
        with self._guard:
            if self._verdict is None:
                try:
                    accepted, self.log_tail = self._check.verdict()
                    if accepted:
                        mark_complete(self._client, self._base, self._tag)
                        if self._on_accept is not None:
                            self._on_accept()
                    else:
                        remove_volume(self._client, self._volume.name)
                    self._verdict = accepted
                except DockerException:
                    remove_volume(self._client, self._volume.name)
                    self._verdict = False
                finally:
                    self._lock.close()
                    if self._on_settle is not None:
                        self._on_settle()
            accepted = self._verdict
        if self._twin is not None:
            self._twin.settle()
        return accepted


class VolumeStore:
    """Sets kept in volumes on a base whose environment is the venv at ``path``: the base tagged
    ``rgbridge-deps:<key>`` plus the volume is the ready set."""

    budget_kind = "python-set"

    def __init__(self, client: docker.DockerClient, path: str) -> None:
        self.client, self.path = client, path

    def books_name(self, tag: str) -> str:
        return volume_for(tag, self.path).name

    def ready(self, tag: str) -> DepsImage | None:
        volume = volume_for(tag, self.path)
        if not image_exists(self.client, tag):
            return None
        if not volume_exists(self.client, volume.name):
            # its volume was removed behind our back: built again
            with contextlib.suppress(DockerException):
                self.client.images.remove(tag, force=False)
            return None
        return DepsImage(tag=tag, cached=True, seconds=0.0, volume=volume)

    def build(
        self, want: DepSet, source: InstallSource, lock: contextlib.ExitStack, twin: TwinOffer | None = None
    ) -> DepsImage:
        volume = volume_for(want.tag, self.path)
        closest = find_closest(self.client, want) if source.mode == "index" else None
        # the closest set stays in use (never evicted) while it is copied
        with hold(self.client, self.books_name(closest.tag)) if closest else contextlib.nullcontext():
            if closest is not None and not volume_exists(self.client, closest.volume):
                closest = None  # evicted between the choice and the lease
            # a twin only from the base's venv (``twin.py``): not offered to a delta build
            res = build_in_volume(
                self.client, want, source, volume, start_from=closest, twin=twin if closest is None else None
            )
        raise_unless_ok(res, source.timeout)
        twin_check = self._hand_over_twin(res.seconds, twin, res.twin) if twin is not None else None
        pins = merged_pins(res.started_from.pins, res.installed) if res.started_from else res.installed

        def accepted() -> None:
            remember(self.client, volume.name, want, pins)
            # the store learns what this set lacked, off the score's path
            fill_bytecode(self.client, want.base, res.bytecode_missing, after=source.cached)

        if res.check is None:
            mark_complete(self.client, want.base, want.tag)
            accepted()
            return DepsImage(tag=want.tag, cached=False, seconds=res.seconds, log_tail=res.log_tail, volume=volume)
        # the twin's check is settled after this set's, should nobody else settle it
        # pip's check still runs: the base + the volume score now; the tag (and the lock, held
        # until then so no other build of this set starts) wait for pip's verdict.
        pending = VolumePendingCheck(
            self.client,
            res.check,
            base=want.base,
            tag=want.tag,
            volume=volume,
            lock=lock.pop_all(),
            on_accept=accepted,
            twin=twin_check,
        )
        return DepsImage(
            tag=want.base,
            cached=False,
            seconds=res.seconds,
            log_tail=res.log_tail,
            volume=volume,
            pending_check=pending,
        )

    def _hand_over_twin(self, seconds: float, offer: TwinOffer, built: TwinBuilt | None) -> PendingCheck | None:
        """The twin ``built`` by this build, to whoever claims ``offer`` (``twin.claim``):
        tagged already when pip accepted it before the build ended, else handed out with its
        pending check (which keeps its build lock until the verdict). Not made: nothing."""
        if built is None:
            return None
        want, volume = offer.want, offer.volume

        def accepted() -> None:
            remember(self.client, volume.name, want, built.pins)  # the bytecode: the maker's fill

        if built.check is None:
            mark_complete(self.client, want.base, want.tag)
            accepted()
            offer.resolve(DepsImage(tag=want.tag, cached=False, seconds=seconds, log_tail=built.log, volume=volume))
            return None
        pending = VolumePendingCheck(
            self.client,
            built.check,
            base=want.base,
            tag=want.tag,
            volume=volume,
            lock=offer.lock,
            on_accept=accepted,
            on_settle=lambda: withdraw(want.tag),
        )
        offer.resolve(
            DepsImage(
                tag=want.base, cached=False, seconds=seconds, log_tail=built.log, volume=volume, pending_check=pending
            )
        )
        return pending
