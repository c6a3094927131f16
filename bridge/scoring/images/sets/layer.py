"""Layer builds: a build container's environment folder becomes the image's one new layer.

One build container (``buildbox``) runs the install script; its environment folder becomes the
image's one new layer (``layer_export``; a commit when that is not possible), instead of a legacy
build's per-step commits, each slow on fuse-overlayfs; ``LayerStore``, the dependency store
(``store.DepStore``) of sets kept as layers."""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import docker
from docker.errors import DockerException
from docker.models.containers import Container

from bridge.scoring.images.base import (
    LOG_TAIL_CHARS,
    BuildResult,
    LayerLoadError,
    image_exists,
    load_layer_image,
    say,
)
from bridge.scoring.images.sets.buildbox import (
    UV_REJECTED,
    effective_mode,
    env_prefix,
    installed_pins,
    rebuild_with_pip,
    start_build_container,
    wait_ready,
)
from bridge.scoring.images.sets.layer_export import (
    LayerExportError,
    export_folder_layer,
    valid_prefix,
)
from bridge.scoring.images.sets.store import DepSet, DepsImage, InstallSource, raise_unless_ok
from bridge.scoring.sandbox.docker_client import LABEL_KIND, LABEL_OWNER, OWNER_VALUE
from bridge.scoring.types import ProgressFn


def _commit_changes(client: docker.DockerClient, base: str, kind: str) -> list[str]:
    """Dockerfile changes that give the committed layer its base's run config back (the build
    container's command and user are not the image's) plus our labels."""
    config = client.images.get(base).attrs.get("Config") or {}
    changes = [
        f"LABEL {LABEL_OWNER}={OWNER_VALUE} {LABEL_KIND}={kind}",
        f"USER {config.get('User') or 'root'}",
        f"WORKDIR {config.get('WorkingDir') or '/'}",
    ]
    if config.get("Cmd"):
        changes.append(f"CMD {json.dumps(config['Cmd'])}")
    return changes


def _commit(container: Container, client: docker.DockerClient, *, base: str, tag: str, kind: str) -> None:
    repo, _, version = tag.rpartition(":")
    container.commit(repository=repo, tag=version, changes=_commit_changes(client, base, kind))


def _load_exported(
    container: Container, client: docker.DockerClient, *, base: str, tag: str, kind: str, prefix: str, say_: ProgressFn
) -> bool:
    """``tag`` = ``base`` + the container's environment folder as one layer (``layer_export``);
    False (and no ``tag``) when there is no venv to export or the export fails."""
    if not valid_prefix(prefix):
        return False
    with tempfile.TemporaryDirectory(prefix="rgbridge-export-") as tmp:
        try:
            diff_id = export_folder_layer(container, prefix, Path(tmp) / "layer.tar")
            load_layer_image(
                client,
                base=base,
                tag=tag,
                layer_tar=Path(tmp) / "layer.tar",
                diff_id=diff_id,
                labels={LABEL_OWNER: OWNER_VALUE, LABEL_KIND: kind},
                comment=f"rgbridge {kind} layer: {prefix}",
            )
            return True
        except (LayerExportError, LayerLoadError) as exc:
            say_(f"exporting {prefix} as a layer failed ({exc}); committing the container instead")
            _forget_tag(client, tag)
            return False


def _forget_tag(client: docker.DockerClient, tag: str) -> None:
    with contextlib.suppress(DockerException):
        client.images.remove(tag, force=True)


def build_layer(client: docker.DockerClient, want: DepSet, source: InstallSource, *, kind: str = "deps") -> BuildResult:
    """Run ``assets/install_set.sh`` over ``want.files`` in one container FROM ``want.base`` and
    save it as ``want.tag`` (a layer, else a commit).

    ``source.view`` (the package cache) and ``source.wheels`` (a wheelhouse, ``local`` mode) are bind-mounted
    read-only: the build writes nothing on the host. No network in ``local`` mode. In ``index``
    mode a build whose uv install pip does not accept is run again in ``pip`` mode (and says so
    in its log). ``on_installed`` gets the installed ``name==version`` pins once the install
    succeeded, while the layer is being saved.
    """
    from bridge.scoring.sandbox.containers import managed, read_logs, wait_with_timeout

    started = time.monotonic()

    def remaining() -> float:
        return max(5.0, source.timeout - (time.monotonic() - started))

    mode = effective_mode(source.mode)
    notes: list[str] = []
    while True:
        container, ready_mark = start_build_container(
            client,
            base=want.base,
            kind=kind,
            requirement_files=want.files,
            mode=mode,
            view=source.view,
            wheels=source.wheels,
        )
        with managed(container):
            say_: ProgressFn = functools.partial(say, source.progress)
            saved = ""
            pins: list[str] | None = None
            if mode == "index" and wait_ready(container, ready_mark, remaining()):
                # The environment is final; pip's last check runs while the layer is saved.
                pins = installed_pins(read_logs(container))
                if source.on_installed is not None:
                    source.on_installed(pins)
                try:
                    if _load_exported(
                        container,
                        client,
                        base=want.base,
                        tag=want.tag,
                        kind=kind,
                        prefix=env_prefix(read_logs(container)),
                        say_=say_,
                    ):
                        saved = "layer"
                except DockerException as exc:
                    say_(f"saving the layer early failed ({exc}); saving it once the build ends")
            outcome = wait_with_timeout(container, remaining())
            log = read_logs(container)
            for line in log.splitlines():
                if line.strip():
                    say(source.progress, line)
            tail = "".join(notes) + log[-LOG_TAIL_CHARS:]
            elapsed = time.monotonic() - started
            if saved and (outcome.timed_out or outcome.exit_code != 0):
                _forget_tag(client, want.tag)  # saved while pip checked, but pip did not accept it
            if outcome.timed_out:
                return BuildResult(
                    False, want.tag, elapsed, tail, f"build timed out after {source.timeout:.0f}s", timed_out=True
                )
            if outcome.exit_code == UV_REJECTED and mode == "index":
                mode = rebuild_with_pip(log, notes, source.progress)
                continue
            if outcome.exit_code != 0:
                return BuildResult(False, want.tag, elapsed, tail, f"install exited {outcome.exit_code}")
            if pins is None:
                pins = installed_pins(log)
                if source.on_installed is not None:
                    source.on_installed(pins)
            try:
                if not saved:
                    exported = _load_exported(
                        container, client, base=want.base, tag=want.tag, kind=kind, prefix=env_prefix(log), say_=say_
                    )
                    if not exported:
                        _commit(container, client, base=want.base, tag=want.tag, kind=kind)
                    saved = "layer" if exported else "commit"
            except DockerException as exc:
                _forget_tag(client, want.tag)
                return BuildResult(False, want.tag, time.monotonic() - started, tail, f"saving the layer failed: {exc}")
        return BuildResult(
            True,
            want.tag,
            time.monotonic() - started,
            tail + f"RGBRIDGE_SAVED={saved}\n",
            installed=pins,
            installer=mode,
        )


class LayerStore:
    """Sets kept as image layers (``build_layer``): the tag is the ready set."""

    budget_kind = "python-layer"

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    def books_name(self, tag: str) -> str:
        return tag

    def ready(self, tag: str) -> DepsImage | None:
        return DepsImage(tag=tag, cached=True, seconds=0.0) if image_exists(self.client, tag) else None

    def build(self, want: DepSet, source: InstallSource, lock: ExitStack) -> DepsImage:
        # pip installs the requirements, then the extras into that environment: one container
        # runs both steps from the base, so compat's layer is built beside strict's instead of
        # waiting for it (docs/measurements.md).
        res = build_layer(self.client, want, source)
        raise_unless_ok(res, source.timeout)
        return DepsImage(tag=want.tag, cached=False, seconds=res.seconds, log_tail=res.log_tail)
