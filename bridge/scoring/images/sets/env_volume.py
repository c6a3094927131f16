"""Dependency environments kept in Docker volumes instead of image layers.

A never-seen requirements set on a base image whose environment is a venv (our base and tester
images: ``/opt/venv``) is installed into a named volume that Docker seeds with the base's venv
on first mount; the scoring sandboxes mount that volume read-only at the venv's path. Compared
with a layer (``layer.py``), nothing is saved or loaded: installs write to the engine's volume
folder instead of through ``fuse-overlayfs``, and a score can start as soon as the environment
is final, while pip's acceptance check still runs (a pending check, ``store.PendingCheck``). docs/measurements.md has
the figures.

The finished set is marked by the tag ``rgbridge-deps:<key>`` on the base image (the volume
without its tag is an unfinished or rejected build, removed before the next one). The volume is
named after the tag, carries our labels and is removed with the deps images
(``inventory.remove_images``). Like a layer build, the build container runs as root with the
package cache and tools mounted read-only; the host writes nothing into the volume.
"""

from __future__ import annotations

import atexit
import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import docker
import requests
from docker.errors import APIError, DockerException, NotFound
from docker.models.containers import Container

from bridge.scoring.images.base import LOG_TAIL_CHARS, Background, BuildResult, say, volume_exists
from bridge.scoring.images.disk import LABEL_DEPS_TAG, SEED_KIND, VOLUME_KIND
from bridge.scoring.images.sets.buildbox import (
    BUILD_DIR,
    BUILD_SCRIPT,
    GO_SIGNAL,
    UV_REJECTED,
    checked_mark,
    effective_mode,
    installed_pins,
    rebuild_with_pip,
    start_build_container,
    wait_ready,
)
from bridge.scoring.images.sets.bytecode import FILL_SECONDS, STORE_DIR, missing_keys, start_fill, store_mount
from bridge.scoring.images.sets.closest import (
    CLOSEST_DIR,
    DELTA_DIFFERS,
    SetRecord,
    delta_check,
)
from bridge.scoring.images.sets.layer_export import valid_prefix
from bridge.scoring.images.sets.reaper import compile_done, hand_over, starting, watch_compile
from bridge.scoring.images.sets.store import DepSet, EnvVolume, InstallSource
from bridge.scoring.images.sets.twin import TWIN_DIR, TwinBuilt, TwinOffer, built_twin
from bridge.scoring.sandbox.docker_client import LABEL_KIND, LABEL_OWNER, OWNER_VALUE, make_labels

VOLUME_PREFIX = "rgbridge-env-"
SEED_PREFIX = "rgbridge-seed-"
SEED_MARK = ".rgbridge-seeded"
_SEED = "/run/rgbridge/seed"


def venv_path(client: docker.DockerClient, image: str) -> str | None:
    """The image's active venv: its ``VIRTUAL_ENV`` when that venv's ``bin`` leads its PATH
    (what ``python`` runs in the image); None when the image has no such venv."""
    try:
        config = client.images.get(image).attrs.get("Config") or {}
    except DockerException:
        return None
    env = dict(item.split("=", 1) for item in (config.get("Env") or []) if "=" in item)
    venv = env.get("VIRTUAL_ENV", "")
    if not valid_prefix(venv):
        return None
    path = env.get("PATH", "").split(":")
    return venv if path and path[0] == f"{venv}/bin" else None


def volume_for(tag: str, path: str) -> EnvVolume:
    return EnvVolume(name=VOLUME_PREFIX + tag.rpartition(":")[2], path=path)


def remove_volume(client: docker.DockerClient, name: str) -> bool:
    """Remove the volume; False when it is in use (kept) or already gone."""
    try:
        client.volumes.get(name).remove(force=True)
        return True
    except (NotFound, APIError):
        return False


def mark_complete(client: docker.DockerClient, base: str, tag: str) -> None:
    """Tag ``base`` as ``tag``: the set in the volume is finished and accepted."""
    repo, _, key = tag.rpartition(":")
    client.images.get(base).tag(repo, key)


def seed_volume(client: docker.DockerClient, base: str, path: str, *, remake: bool = False) -> str:
    """A volume holding ``base``'s venv at ``path`` as the image has it, made once per base
    image: each build copies it into its fresh volume (a copy between two volumes is native,
    where Docker's seeding of a new volume reads the image through fuse-overlayfs, about a
    second per build). The seed is never mounted writable by anything of the agent's.

    ``remake``: the seed was found without its mark (its maker died), so it is removed and made
    again. Existence is only trusted under the lock: a seed being made exists before it is full."""
    from bridge.scoring.images.base import build_lock
    from bridge.scoring.sandbox.containers import create_container, managed, wait_with_timeout
    from bridge.scoring.sandbox.protocol import SandboxLimits

    image_id = client.images.get(base).id
    name = f"{SEED_PREFIX}{image_id.split(':')[-1][:12]}"
    with build_lock(name):
        if remake:
            # in use means another build is copying it: it was made again meanwhile, kept
            remove_volume(client, name)
        if volume_exists(client, name):
            return name
        # labelled with the image's id: a rebuilt base leaves its old seed an orphan (swept)
        client.volumes.create(name, labels={LABEL_OWNER: OWNER_VALUE, LABEL_KIND: SEED_KIND, LABEL_DEPS_TAG: image_id})
        try:
            # Docker copies the image's folder into the empty volume at this first mount; the
            # mark (removed from every copy) says the copy finished.
            container = create_container(
                client,
                base,
                name=f"rgbridge-seed-{secrets.token_hex(5)}",
                command=["touch", f"{path}/{SEED_MARK}"],
                labels=make_labels(kind="deps-build"),
                limits=SandboxLimits(user="0:0", network_mode="none"),
                mounts=[docker.types.Mount(path, name, type="volume")],
            )
            with managed(container):
                container.start()
                outcome = wait_with_timeout(container, 120)
            if outcome.timed_out or outcome.exit_code != 0:
                raise DockerException(f"seeding {name} exited {outcome.exit_code}")
        except BaseException:
            remove_volume(client, name)
            raise
    return name


#: the CPU weight of a check left running beside a score from the set's ready mark, and of the
#: bytecode compile after it: the lowest Docker takes (its default is 1024), so they run on what
#: the score leaves idle. A check held until a profile ended, at 64, ran mostly after the score
#: and was its last second (docs/measurements.md)
CHECK_CPU_SHARES = 2
DEFAULT_CPU_SHARES = 1024
#: how long a held bytecode compile may run once its score is over before its container goes
COMPILE_ALLOWANCE = 300.0
#: exit status of a build whose seed volume lacks its mark
SEED_INCOMPLETE = 4


def seeded_start(path: str, source: str = _SEED) -> str:
    """The build container's command: the base's venv copied from the seed (or a delta build's
    closest set, ``closest.py``) into the fresh volume (attributes, links and owners kept, as
    Docker's own seeding does), then the build."""
    return (
        f"[ -f {_SEED}/{SEED_MARK} ] || {{ echo 'RGBRIDGE_SEED_INCOMPLETE'; exit {SEED_INCOMPLETE}; }}; "
        f"cp -a {source}/. {path}/ && rm -f {path}/{SEED_MARK} && exec bash {BUILD_SCRIPT}"
    )


def _delta_reason(log: str) -> str:
    found = [x for x in log.splitlines() if x.startswith("RGBRIDGE_DELTA_DIFFERS")]
    return found[-1].removeprefix("RGBRIDGE_DELTA_DIFFERS").strip()[:300] if found else "not checked"


class CheckContainer:
    """pip's acceptance check of a uv install, still running in the build container after the
    environment became final. ``verdict`` (called once the score is over) gives pip's verdict as
    soon as the build prints it (``buildbox.checked_mark``), then lets the build compile the
    set's bytecode (held until then: ``hold_compile`` in ``assets/install_set.sh``), which
    finishes in the background; the container is removed when it ends (``wait_for_compiles``)."""

    def __init__(self, container: Container, deadline: float, checked: str = "", notes: str = "") -> None:
        self._container = container
        self._deadline = deadline
        self._checked = checked
        self._notes = notes  # the build's own notes, kept at the top of the log

    def _weigh(self, shares: int) -> None:
        with contextlib.suppress(DockerException, requests.RequestException):
            self._container.update(cpu_shares=shares)

    def verdict(self) -> tuple[bool, str]:
        from bridge.scoring.sandbox.containers import read_logs, remove_container, wait_with_timeout

        reaped = False
        try:
            # the score this check ran beside is over: the rest of the check is now what the
            # caller waits for, at the default CPU weight; the bytecode after it goes back to low
            self._weigh(DEFAULT_CPU_SHARES)
            remaining = max(5.0, self._deadline - time.monotonic())
            if self._checked and wait_ready(self._container, self._checked, remaining):
                log = read_logs(self._container)
                self._weigh(CHECK_CPU_SHARES)
                with contextlib.suppress(DockerException, requests.RequestException):
                    self._container.kill(signal=GO_SIGNAL)  # the held bytecode compile starts
                # the compile starts now, however long the score took: it gets its own time
                _reap(self._container, max(self._deadline, time.monotonic() + COMPILE_ALLOWANCE))
                reaped = True
                return True, self._notes + log[-LOG_TAIL_CHARS:]
            outcome = wait_with_timeout(self._container, max(5.0, self._deadline - time.monotonic()))
            log = read_logs(self._container)
        except (DockerException, requests.RequestException) as exc:
            return False, f"pip's check could not be followed: {exc}\n"
        finally:
            if not reaped:
                with contextlib.suppress(DockerException, requests.RequestException):
                    remove_container(self._container)
        return (not outcome.timed_out and outcome.exit_code == 0), self._notes + log[-LOG_TAIL_CHARS:]


# Build containers still compiling bytecode into an accepted set, removed when they end. Daemon
# threads: a process that exits meanwhile hands them to a reaper of their own (reaper.py) rather
# than making its user wait for bytecode the score did not need.
_compiles = Background(daemon=True)
atexit.register(hand_over)


def _wait_and_remove(container: Container, deadline: float) -> None:
    from bridge.scoring.sandbox.containers import remove_container, wait_with_timeout

    try:
        with contextlib.suppress(DockerException, requests.RequestException):
            wait_with_timeout(container, max(5.0, deadline - time.monotonic()))
        with contextlib.suppress(DockerException, requests.RequestException):
            remove_container(container)
    finally:
        compile_done(str(container.id))


def _reap(container: Container, deadline: float) -> None:
    watch_compile(str(container.id), deadline)
    _compiles.start(lambda: _wait_and_remove(container, deadline), "set-compile")


def fill_bytecode(
    client: docker.DockerClient, base: str, keys: list[str], *, after: Callable[[], object] | None = None
) -> None:
    """Compile the bytecode store's missing ``keys`` in the background (``bytecode.py``): started
    off the caller's thread (the profile whose set was accepted may be the score's last), waited
    for and removed as a set's compile is (a process that exits hands it to a reaper). ``after``
    first: the wheels the build's host fetch brings (the fill reads the package cache)."""
    if not keys:
        return

    def run() -> None:
        if after is not None:
            after()
        with starting():
            container = start_fill(client, base, keys)
            if container is None:
                return
            deadline = time.monotonic() + FILL_SECONDS
            watch_compile(str(container.id), deadline)
        _wait_and_remove(container, deadline)

    _compiles.start(run, "bytecode-fill")


def wait_for_compiles(timeout: float = 600.0) -> bool:
    """Wait for the bytecode still being compiled into accepted sets; True when none is left."""
    return _compiles.wait(timeout)


@dataclass
class VolumeBuild(BuildResult):
    #: set when pip's check was left running (``allow_pending_check``): the caller must settle it
    check: CheckContainer | None = None
    #: the finished set this one was started from (``closest.py``), None: from the base's venv
    started_from: SetRecord | None = None
    #: distributions the build installed that the bytecode store lacks (``bytecode.py``)
    bytecode_missing: list[str] = field(default_factory=list)
    #: the twin set the build made from its first files (``twin.py``), None: not made
    twin: TwinBuilt | None = None


def build_in_volume(
    client: docker.DockerClient,
    want: DepSet,
    source: InstallSource,
    volume: EnvVolume,
    *,
    start_from: SetRecord | None = None,
    twin: TwinOffer | None = None,
) -> VolumeBuild:
    """Install ``want.files`` (in turn) into a fresh ``volume`` holding ``want.base``'s venv, or
    a copy of the finished set ``start_from`` (uv mode; ``closest.py``: the caller holds it in
    use), falling back to the base's venv when the delta's environment is not a fresh one's.

    ``source.mode`` as in ``assets/install_set.sh``. In ``index`` mode pip's check either runs before
    this returns (a rejection rebuilds in ``pip`` mode here) or, with ``allow_pending_check``, is left
    running: the result carries it as ``pending`` once the environment is final, and a
    rejection is the caller's to handle (``deps.ensure_deps_image``). A failed build removes
    the volume.

    ``twin``: the set of the first ``twin.after`` files, copied by this build into the offered
    volume (``twin.py``; uv's install from the base's venv only): ``VolumeBuild.twin`` says
    what became of it; its volume is removed when it was not made.
    """
    from bridge.scoring.sandbox.containers import read_logs, remove_container, wait_with_timeout

    started = time.monotonic()

    def remaining() -> float:
        return max(5.0, source.timeout - (time.monotonic() - started))

    mode = effective_mode(source.mode)
    notes: list[str] = []
    seed = seed_volume(client, want.base, volume.path)
    # the bytecode store, where the set's bytecode is compiled late (uv builds in volumes)
    store = store_mount(client, want.base) if mode == "index" else None
    while True:
        remove_volume(client, volume.name)  # an unfinished or rejected build's leftovers
        delta = start_from is not None and mode == "index"
        twin_mounts = []
        if twin is not None and mode == "index" and start_from is None:
            remove_volume(client, twin.volume.name)
            client.volumes.create(
                twin.volume.name,
                labels={LABEL_OWNER: OWNER_VALUE, LABEL_KIND: VOLUME_KIND, LABEL_DEPS_TAG: twin.want.tag},
            )
            twin_mounts = [docker.types.Mount(TWIN_DIR, twin.volume.name, type="volume", no_copy=True)]
        delta_mounts = (
            [docker.types.Mount(CLOSEST_DIR, start_from.volume, type="volume", read_only=True, no_copy=True)]
            if delta and start_from is not None
            else []
        )
        client.volumes.create(
            volume.name,
            labels={LABEL_OWNER: OWNER_VALUE, LABEL_KIND: VOLUME_KIND, LABEL_DEPS_TAG: want.tag},
        )
        # The set's volume is the one writable place that outlives the build, filled from the seed.
        container, ready_mark = start_build_container(
            client,
            base=want.base,
            kind="deps",
            requirement_files=want.files,
            mode=mode,
            view=source.view,
            wheels=source.wheels,
            mounts=[
                docker.types.Mount(volume.path, volume.name, type="volume", no_copy=True),
                docker.types.Mount(_SEED, seed, type="volume", read_only=True, no_copy=True),
                *delta_mounts,
                *([store] if store is not None and mode == "index" else []),
                *twin_mounts,
            ],
            command=["bash", "-c", seeded_start(volume.path, CLOSEST_DIR if delta_mounts else _SEED)],
            compile_late=True,  # bytecode after the ready mark and pip's verdict (assets/install_set.sh)
            hold_compile=source.allow_pending_check,  # until CheckContainer.verdict: the score is over
            verify=delta_check([f"{BUILD_DIR}/{name}" for name in want.files], _SEED) if delta_mounts else (),
            bytecode_dir=STORE_DIR if store is not None and mode == "index" else "",
            twin_dir=TWIN_DIR if twin_mounts else "",
            twin_after=twin.after if twin is not None else 0,
        )
        if delta_mounts and start_from is not None:
            notes.append(f"started from the closest set {start_from.tag}: only what it lacks is installed\n")
            say(source.progress, notes[-1].strip())
        handed_over = False
        try:
            if source.allow_pending_check and mode == "index" and wait_ready(container, ready_mark, remaining()):
                log = read_logs(container)
                for line in log.splitlines():
                    if line.strip():
                        say(source.progress, line)
                pins = installed_pins(log)
                if source.on_installed is not None:
                    source.on_installed(pins)
                # pip's check runs beside the score from now on: the score comes first
                with contextlib.suppress(DockerException):
                    container.update(cpu_shares=CHECK_CPU_SHARES)
                handed_over = True
                twin_built = (
                    built_twin(log, ready_mark, want, twin, follow=container, deadline=started + source.timeout)
                    if twin_mounts
                    else None
                )
                if twin_mounts and twin is not None and twin_built is None:
                    remove_volume(client, twin.volume.name)
                return VolumeBuild(
                    True,
                    want.tag,
                    time.monotonic() - started,
                    "".join(notes) + log[-LOG_TAIL_CHARS:],
                    installed=pins,
                    installer=mode,
                    check=CheckContainer(container, started + source.timeout, checked_mark(ready_mark), "".join(notes)),
                    started_from=start_from if delta_mounts else None,
                    bytecode_missing=missing_keys(log),
                    twin=twin_built,
                )
            outcome = wait_with_timeout(container, remaining())
            log = read_logs(container)
        finally:
            if not handed_over:
                with contextlib.suppress(DockerException, requests.RequestException):
                    remove_container(container)
        ended_ok = outcome.exit_code == 0 and not outcome.timed_out
        twin_built = built_twin(log, ready_mark, want, twin, ended_ok=ended_ok) if twin_mounts else None
        if twin_mounts and twin is not None and twin_built is None:
            remove_volume(client, twin.volume.name)
        for line in log.splitlines():
            if line.strip():
                say(source.progress, line)
        tail = "".join(notes) + log[-LOG_TAIL_CHARS:]
        elapsed = time.monotonic() - started
        if outcome.timed_out or outcome.exit_code != 0:
            remove_volume(client, volume.name)
        if outcome.timed_out:
            return VolumeBuild(
                False, want.tag, elapsed, tail, f"build timed out after {source.timeout:.0f}s", timed_out=True
            )
        if outcome.exit_code == SEED_INCOMPLETE:
            # a seed whose copy never finished (its maker died): made again, once
            if notes and notes[-1].startswith("seed"):
                return VolumeBuild(
                    False, want.tag, elapsed, tail, "the base's venv could not be copied into the volume"
                )
            seed = seed_volume(client, want.base, volume.path, remake=True)
            notes.append("seed volume was incomplete: made again\n")
            continue
        if outcome.exit_code == DELTA_DIFFERS and delta_mounts and start_from is not None:
            notes[-1] = f"started from the closest set {start_from.tag}: {_delta_reason(log)}; built from scratch\n"
            say(source.progress, notes[-1].strip())
            start_from = None
            continue
        if outcome.exit_code == UV_REJECTED and mode == "index":
            mode = rebuild_with_pip(log, notes, source.progress)
            continue
        if outcome.exit_code != 0:
            return VolumeBuild(False, want.tag, elapsed, tail, f"install exited {outcome.exit_code}")
        pins = installed_pins(log)
        if source.on_installed is not None:
            source.on_installed(pins)
        return VolumeBuild(
            True,
            want.tag,
            elapsed,
            tail,
            installed=pins,
            installer=mode,
            started_from=start_from if delta_mounts else None,
            bytecode_missing=missing_keys(log),
            twin=twin_built,
        )
