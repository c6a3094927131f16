"""The volume store: dependency sets kept in volumes, handed out while their pip check is pending.

The volume store (``store.DepStore`` for sets kept in volumes, ``env_volume.py``): a finished
set is the base tagged ``rgbridge-deps:<key>`` plus its volume; a set whose pip check is still
running is handed out with its pending check (``VolumePendingCheck``); a never-seen set may start from the closest
finished one (``closest.py``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import docker
from docker.errors import DockerException

from bridge.scoring.images.base import image_exists, volume_exists
from bridge.scoring.images.disk import hold
from bridge.scoring.images.sets.closest import find_closest, merged_pins, remember
from bridge.scoring.images.sets.env_volume import (
    CheckContainer,
    build_in_volume,
    fill_bytecode,
    mark_complete,
    remove_volume,
    volume_for,
)
from bridge.scoring.images.sets.store import DepSet, DepsImage, EnvVolume, InstallSource, raise_unless_ok


class VolumePendingCheck:
    """A set's pending check in the volume store (``store.PendingCheck``): ``settle`` takes pip's
    verdict, then the tag (accepted) or the volume's removal (rejected), then releases the build
    lock. ``settle`` is idempotent."""

    def __init__(
        self,
        client: docker.DockerClient,
        check: CheckContainer,
        *,
        base: str,
        tag: str,
        volume: EnvVolume,
        lock: contextlib.ExitStack,
        on_accept: Callable[[], None] | None = None,
    ) -> None:
        self._client, self._check, self._base, self._tag, self._volume = client, check, base, tag, volume
        self._lock, self._on_accept = lock, on_accept
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
            return self._verdict


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

    def build(self, want: DepSet, source: InstallSource, lock: contextlib.ExitStack) -> DepsImage:
        volume = volume_for(want.tag, self.path)
        closest = find_closest(self.client, want) if source.mode == "index" else None
        # the closest set stays in use (never evicted) while it is copied
        with hold(self.client, self.books_name(closest.tag)) if closest else contextlib.nullcontext():
            if closest is not None and not volume_exists(self.client, closest.volume):
                closest = None  # evicted between the choice and the lease
            res = build_in_volume(self.client, want, source, volume, start_from=closest)
        raise_unless_ok(res, source.timeout)
        pins = merged_pins(res.started_from.pins, res.installed) if res.started_from else res.installed

        def accepted() -> None:
            remember(self.client, volume.name, want, pins)
            # the store learns what this set lacked, off the score's path
            fill_bytecode(self.client, want.base, res.bytecode_missing, after=source.cached)

        if res.check is None:
            mark_complete(self.client, want.base, want.tag)
            accepted()
            return DepsImage(tag=want.tag, cached=False, seconds=res.seconds, log_tail=res.log_tail, volume=volume)
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
        )
        return DepsImage(
            tag=want.base,
            cached=False,
            seconds=res.seconds,
            log_tail=res.log_tail,
            volume=volume,
            pending_check=pending,
        )
