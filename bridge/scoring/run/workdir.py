"""What both profiles share: the scoring context (with the order in which the profiles of one
score build their sets), log files with size caps, repo staging."""

from __future__ import annotations

import os
import secrets
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import docker

from bridge.fs.walk import copy_tree_at
from bridge.scoring.images.base import DependencyInstallError
from bridge.scoring.images.sets import REJECTED_NOTE, DepsImage
from bridge.scoring.result import ProfileResult
from bridge.scoring.sandbox.docker_sandbox import DockerRuntime
from bridge.scoring.sandbox.protocol import SandboxLimits, SandboxRuntime
from bridge.scoring.types import ProgressFn

ASSETS = Path(__file__).resolve().parent.parent / "assets"
LOG_CAP_BYTES = 2_000_000
#: the longest a profile waits for the first profile's dependency set before building its own
TURN_LIMIT = 3.0


class SetTurns:
    """The order in which the profiles of one score build never-seen dependency sets.

    A score ends with its last profile, and compat's one container (install check, deploy,
    tests, in turn) runs longer than strict's, so compat's set is the one on the path. Two
    builds at once on a small machine slow each other (docs/measurements.md): strict's build
    waits until compat's set is ready (a set already on disk never waits), or ``limit``
    seconds at most, should compat's build be a long one (packages to download)."""

    def __init__(self, profiles: Sequence[str] = (), *, limit: float | None = None) -> None:
        self.first = "compat" if {"compat", "strict"} <= set(profiles) else None
        self.limit = TURN_LIMIT if limit is None else limit
        self._done = threading.Event()

    @property
    def paired(self) -> bool:
        """Both profiles score here: compat's build may make strict's set as its twin
        (``images/sets/twin.py``) when their bases are the same."""
        return self.first is not None

    def wait(self, profile: str) -> None:
        """Called before ``profile`` builds a set: its turn, once the first profile's set is ready."""
        if self.first is not None and profile != self.first:
            self._done.wait(self.limit)

    def done(self, profile: str) -> None:
        """``profile``'s set is ready, or it will build none (its build failed, it ended)."""
        if profile == self.first:
            self._done.set()


@dataclass
class ScoreContext:
    run_id: str
    wheelhouse: Path | None = None
    image_progress: ProgressFn | None = None
    service_limits: SandboxLimits = field(default_factory=SandboxLimits)
    # Where sandboxes run; None = Docker on the runner's client (bridge/scoring/sandbox/docker_sandbox.py).
    runtime: SandboxRuntime | None = None
    extra_labels: dict[str, str] = field(default_factory=dict)
    token: str = field(default_factory=lambda: secrets.token_hex(3))
    # shared by the profiles of one score run in this process (``LocalBackend``)
    turns: SetTurns = field(default_factory=SetTurns)

    def sandboxes(self, client: docker.DockerClient) -> SandboxRuntime:
        """The runtime the profile's sandboxes are created by."""
        return self.runtime or DockerRuntime(client)

    def container_name(self, role: str) -> str:
        # <prefix>.<run>.<role>.<random>: run-scoped, so concurrent evaluations never collide.
        safe_run = "".join(c if c.isalnum() or c in "_.-" else "-" for c in self.run_id)[:60]
        return f"rgbridge.{safe_run}.{role}.{self.token}"


class LogSink:
    """Log files of one profile, each capped (head + tail kept)."""

    def __init__(self, directory: Path, cap_bytes: int = LOG_CAP_BYTES) -> None:
        self.dir = directory
        self.cap = cap_bytes
        self._names: dict[str, str] = {}
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode("utf-8", errors="replace"))

    def write_bytes(self, name: str, data: bytes) -> None:
        if len(data) > self.cap:
            half = self.cap // 2
            data = data[:half] + f"\n[... {len(data) - 2 * half} bytes truncated ...]\n".encode() + data[-half:]
        (self.dir / name).write_bytes(data)
        self._names[Path(name).stem.replace(".", "_")] = f"{self.dir.name}/{name}"

    def names(self) -> dict[str, str]:
        return dict(self._names)


def requirements_of(repo_dir: Path) -> str:
    path = repo_dir / "requirements.txt"
    if path.is_file() and not path.is_symlink():
        return path.read_text(encoding="utf-8", errors="replace")[:200_000]
    return ""


def place_file(source: Path, root: Path, relative: str) -> None:
    """Copy `source` to `root/relative` without ever following a link the agent planted.

    Staged repos keep the agent's symlinks; a write through one (`README.md -> /etc/passwd`)
    would land on the host. Every existing component on the way that is a symlink or a file
    is replaced by a real directory, and whatever sits at the destination is removed first.
    """
    target = root
    for part in Path(relative).parts[:-1]:
        target = target / part
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()
        target.mkdir(exist_ok=True)
    dest = target / Path(relative).name
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.is_dir():
        shutil.rmtree(dest)
    shutil.copyfile(source, dest)


def merge_tree(source: Path, root: Path, relative: str, ignore: tuple[str, ...] = ("__pycache__", "*.pyc")) -> None:
    """COPY-style merge of the `source` tree into `root/relative` (same-named files replaced,
    others kept), safely: see `place_file`."""
    skip = shutil.ignore_patterns(*ignore)
    for directory, dirs, files in os.walk(source):
        dropped = skip(directory, dirs + files)
        dirs[:] = [d for d in dirs if d not in dropped]
        rel_dir = Path(directory).relative_to(source)
        for name in files:
            if name not in dropped and Path(directory, name).is_file():
                place_file(Path(directory, name), root, str(Path(relative) / rel_dir / name))


def stage_repo(src: Path, dest: Path) -> None:
    """Copy an agent repo for scoring with the workspace ignore rules (bridge/fs/ignore.py, a
    superset of upstream's list), so the staged tree hashes as the recorder hashed it. Reads are
    fd-relative with O_NOFOLLOW (bridge/fs/walk.py): symlinks kept as links, never followed."""
    copy_tree_at(src, dest)


def score_on_accepted_set(
    build: Callable[[str | None], DepsImage],
    score: Callable[[DepsImage], ProfileResult],
    *,
    build_failed: Callable[[DependencyInstallError], ProfileResult],
    logs: LogSink,
    progress: ProgressFn,
    profile: str,
) -> ProfileResult:
    """A profile's score on its dependency set, kept only once pip accepts the set.

    ``build(installer)`` makes the set (``ensure_deps_image`` with ``allow_pending_check``: pip may still
    be checking uv's install while ``score`` runs); a rejection scores again on pip's own set
    (``installer="pip"``), with the note at the top of ``build.log``. A failed install is
    ``build_failed(error)``. The build log is written before the score (its name is then part
    of the result) and again with pip's check, unless the score wrote its own build log.
    """
    note = ""
    for installer in (None, "pip"):
        try:
            deps = build(installer)
        except DependencyInstallError as exc:
            logs.write("build.log", note + exc.log_tail)
            return build_failed(exc)
        try:
            if deps.log_tail:
                logs.write("build.log", note + deps.log_tail)
            result = score(deps)
        finally:
            accepted = deps.settle()  # also when the score failed: the set is settled either way
        if deps.pending_check is not None and not result.build_error:
            logs.write("build.log", note + deps.build_log())
        if accepted:
            return result
        note = REJECTED_NOTE
        progress(f"{profile}: {REJECTED_NOTE.strip()}")
    raise AssertionError("pip's own install is never left pending")  # pragma: no cover
