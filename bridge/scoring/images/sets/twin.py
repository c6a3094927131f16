"""Twin sets: a set whose files are the first files of another set's on the same base, made by
that set's build from the environment its first files left.

A score with both profiles asks for two never-seen sets on our base: compat's (the repo's
requirements, then upstream's test tools) and strict's (the requirements alone). strict's set
is exactly what compat's build holds after its first file: the same base, the same files, the
same installer and index, seconds apart. So compat's build copies its environment into strict's
volume at that point (``assets/install_set.sh``, ``RGBRIDGE_TWIN_DIR``) and strict's own build
(a second container, a second resolution, its own copy of the base's venv: a second on this
2-core machine, docs/measurements.md) is not made. The twin gets everything its own build
would give it: its own pip check (its files, its environment's pip), the bytecode store's files
of its distributions and its late compile, its tag once pip accepts it.

A twin is only offered when it is certain to be the set asked for and costs nobody anything:
the volume store, uv's install from scratch (no closest set, not pip's rebuild), no such set
on disk, its build lock free at once (``try_build_lock``: no other build of it anywhere) and
room for it in the disk budget beside the set being built. Otherwise strict builds its set
itself, as before. In this process the profile that wants the twin takes it from ``claim``
instead of waiting for the build lock, which the twin keeps until pip's verdict.
"""

from __future__ import annotations

import codecs
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import docker
import requests
from docker.errors import DockerException
from docker.models.containers import Container

from bridge.scoring.images.base import LOG_TAIL_CHARS, try_build_lock
from bridge.scoring.images.disk import hold, lease, room_ahead
from bridge.scoring.images.sets.buildbox import installed_pins, twin_mark
from bridge.scoring.images.sets.store import DepSet, DepsImage, EnvVolume

#: where a twin's volume is mounted in its maker's build container
TWIN_DIR = "/run/rgbridge/twin"
#: how long a profile waits for the build making its set as a twin (that build's own timeout
#: ends it sooner; the offer is always resolved, this is only a backstop)
CLAIM_LIMIT = 3600.0


@dataclass
class TwinOffer:
    """A twin being made: the set, its volume, how many of the maker's files it holds, and its
    build lock (held until pip's verdict on it, or released when it is not made)."""

    want: DepSet
    volume: EnvVolume
    after: int
    lock: contextlib.ExitStack
    image: DepsImage | None = None

    def __post_init__(self) -> None:
        self._resolved = threading.Event()

    @property
    def pending(self) -> bool:
        """Handed out with pip's check still running (its lock is then the check's)."""
        return self.image is not None and self.image.pending_check is not None

    def resolve(self, image: DepsImage | None) -> None:
        """The twin is ready (``image``; may carry its pending check) or will not be made (None)."""
        if not self._resolved.is_set():
            self.image = image
            self._resolved.set()

    def wait(self, timeout: float) -> DepsImage | None:
        return self.image if self._resolved.wait(timeout) else None


_offers: dict[str, TwinOffer] = {}
_guard = threading.Lock()


def claim(tag: str, *, allow_pending_check: bool, timeout: float = CLAIM_LIMIT) -> DepsImage | None:
    """The set ``tag`` when a build of this process is making it as a twin: waits for it, then
    hands it out once (None: not offered, not made, or pending and ``allow_pending_check`` is
    off, in which case it is left to the build lock as any set being built)."""
    with _guard:
        offer = _offers.get(tag)
    if offer is None:
        return None
    image = offer.wait(timeout)
    with _guard:
        if image is None or (offer.pending and not allow_pending_check) or _offers.get(tag) is not offer:
            return None
        del _offers[tag]
    return image


@contextlib.contextmanager
def offered(
    client: docker.DockerClient, want: DepSet, volume: EnvVolume, *, after: int, ready: bool
) -> Iterator[TwinOffer | None]:
    """Offer ``want`` as the twin of the build run inside the block (None when it cannot be
    offered: see the module docstring; ``ready``: it is on disk already). Whatever the block
    does, the offer is resolved on the way out (not made: None) and a twin that was not handed
    over lets go of its build lock."""
    if ready:
        yield None
        return
    lease(client, volume.name)  # in use by this profile's score, never evicted under it
    if not room_ahead(client, 1):
        yield None
        return
    lock = try_build_lock(want.tag)
    if lock is None:
        yield None
        return
    offer = TwinOffer(want=want, volume=volume, after=after, lock=lock)
    with _guard:
        _offers[want.tag] = offer
    try:
        with hold(client, volume.name):
            yield offer
    finally:
        offer.resolve(None)  # no-op when the build resolved it
        if not offer.pending:
            # not made, or finished and tagged (found on disk from now on)
            with _guard:
                if _offers.get(want.tag) is offer:
                    del _offers[want.tag]
            offer.lock.close()  # a pending twin's lock is its check's, released at the verdict


def twin_log(log: str, mark: str) -> str:
    """The twin's part of its maker's log: up to its mark (what its files installed), then its
    verdict's line, without the maker's other files' output."""
    lines = log.splitlines(keepends=True)
    own: list[str] = []
    for line in lines:
        own.append(line)
        if line.strip() == mark:
            break
    own.extend(line for line in lines if line.startswith((f"{mark}_CHECKED", f"{mark}_REJECTED")))
    return "".join(own)[-LOG_TAIL_CHARS:]


def made(log: str, ready_mark: str) -> bool:
    """Did the build that printed ``log`` make its twin?"""
    mark = twin_mark(ready_mark)
    return any(line.strip() == mark for line in log.splitlines())


def verdict_in(log: str, ready_mark: str) -> bool | None:
    """pip's verdict on the twin in a build's log: True, False, or None when not printed."""
    mark = twin_mark(ready_mark)
    for line in log.splitlines():
        if line.startswith(f"{mark}_CHECKED"):
            return True
        if line.startswith(f"{mark}_REJECTED"):
            return False
    return None


class TwinCheck:
    """pip's check of a twin, run by its maker's build container beside the maker's own check:
    the container's log is followed from the moment the twin is handed out, so the verdict is
    known even after the maker's owner removed the container."""

    def __init__(self, container: Container, ready_mark: str, note: str, deadline: float) -> None:
        self._ready_mark = ready_mark
        self._note = note
        self._deadline = deadline
        self._log = ""
        self._ended = threading.Event()
        threading.Thread(target=self._follow, args=(container,), daemon=True, name="twin-check").start()

    def _follow(self, container: Container) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            for chunk in container.logs(stream=True, follow=True):
                text = decoder.decode(chunk)
                self._log += text
                # only the lines this chunk ended or began can hold the verdict (as wait_ready)
                if verdict_in(self._log[-(len(text) + 4096) :], self._ready_mark) is not None:
                    return
        except (DockerException, requests.RequestException):
            pass
        finally:
            self._ended.set()

    def verdict(self) -> tuple[bool, str]:
        """(accepted, the twin's log), by the maker's deadline (its build's timeout) at the
        latest; a container that ended or went away without the verdict, or the deadline,
        means rejected (the twin is then built again by its own build)."""
        self._ended.wait(max(5.0, self._deadline - time.monotonic()))
        accepted = verdict_in(self._log, self._ready_mark) is True
        return accepted, self._note + twin_log(self._log, twin_mark(self._ready_mark))


@dataclass
class TwinBuilt:
    """What a build made of its twin: its pins and log, and pip's verdict, pending (``check``)
    or given before the build ended (``accepted``)."""

    pins: list[str]
    log: str
    check: TwinCheck | None = None
    accepted: bool = False


def withdraw(tag: str) -> None:
    """The twin ``tag`` is settled: a later request finds it on disk (or builds it), not here."""
    with _guard:
        _offers.pop(tag, None)


def built_twin(
    log: str,
    ready_mark: str,
    maker: DepSet,
    offer: TwinOffer | None,
    *,
    follow: Container | None = None,
    deadline: float = 0.0,
    ended_ok: bool = False,
) -> TwinBuilt | None:
    """What a build's ``log`` says of the twin it was offered: None when it was not made. Handed
    out while its maker still runs (``follow``: the maker's container, ``deadline`` its build's
    ``time.monotonic()`` deadline), pip's verdict is pending; else the maker ended (``ended_ok``: successfully) and the twin counts only when
    pip accepted it."""
    if offer is None or not made(log, ready_mark):
        return None
    files = ", ".join(list(maker.files)[: offer.after])
    note = f"made by the build of {maker.tag} from its environment after {files} (the same base and installer)\n"
    own = twin_log(log, twin_mark(ready_mark))
    if follow is not None:
        return TwinBuilt(installed_pins(own), note + own, check=TwinCheck(follow, ready_mark, note, deadline))
    if ended_ok and verdict_in(log, ready_mark) is True:
        return TwinBuilt(installed_pins(own), note + own, accepted=True)
    return None
