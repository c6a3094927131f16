"""Scoring images without a registry: base (debootstrap + ``docker import``), tester, deps.

Image family (every image carries ``rgbridge.owner=rgbridge`` and ``rgbridge.kind``):

* ``rgbridge-base:<recipe hash12>`` -- Debian minbase rootfs made with ``debootstrap`` from the
  mirror in the host's apt sources (override: ``RGBRIDGE_DEBIAN_MIRROR``), with python3, a venv at
  ``/opt/venv`` first on PATH, curl/procps/netcat, user ``app`` (uid/gid 10001), the directories
  ``/repo`` ``/tests`` ``/results`` owned by 10001, and the host's extra CA certificates trusted
  (TLS-intercepting proxies). Imported with ``docker import``; the rootfs tarball is cached.
* ``rgbridge-tester:<hash12>`` -- base + a separate venv ``/opt/tester`` (``TESTER_PINS``), first
  on PATH, so golden tests never share an interpreter with agent code.
* ``rgbridge-deps:<hash12>`` -- a base (or tester) image + ``pip install -r requirements.txt``
  into the image's active venv (the first ``python`` on PATH: ``/opt/venv`` for the base image),
  keyed by the normalised requirements (``reqfile.normalise``).

Base and tester images use docker-py's low-level ``api.build`` (legacy builder on every engine;
no BuildKit). A deps layer is one container FROM its base, committed once (``build_layer``), on
the default bridge network, so pip may reach the package index at build time only; the host's
package cache (``pkgcache.WheelCache``) is bind-mounted read-only. When containers cannot reach
the index, the host's pip downloads binary wheels of named requirements only (never anything of
the agent's to build) and the layer installs with ``--no-index``. Every ``ensure_*`` call returns
immediately when its tag exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from bridge.errors import ScoringError
from bridge.locations import cache_dir
from bridge.scoring import reqfile
from bridge.scoring.docker_client import (
    LABEL_KIND,
    LABEL_OWNER,
    OWNER_VALUE,
    make_labels,
    owner_filter,
)
from bridge.scoring.pkgcache import WheelCache

ProgressFn = Callable[[str], None]

# Bump when the recipe changes in a way the hashed inputs below do not capture.
RECIPE_VERSION = "1"
DEPS_RECIPE_VERSION = "2"

DEFAULT_SUITE = "bookworm"
BASE_PACKAGES: tuple[str, ...] = (
    "python3",
    "python3-venv",
    "python3-pip",
    "ca-certificates",
    "curl",
    "procps",
    "netcat-openbsd",
)
# Pinned once here; the tester image hash covers them.
TESTER_PINS: tuple[str, ...] = (
    "pytest==8.3.5",
    "requests==2.32.3",
    "httpx==0.28.1",
    "pytest-timeout==2.3.1",
)

APP_USER = "app"
APP_UID = 10001
APP_GID = 10001
VENV = "/opt/venv"
TESTER_VENV = "/opt/tester"
APP_DIRS: tuple[str, ...] = ("/repo", "/tests", "/results")  # owned by APP_UID in the base image
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_PATH = f"{VENV}/bin:{SYSTEM_PATH}"
TESTER_PATH = f"{TESTER_VENV}/bin:{BASE_PATH}"
PIP_DEFAULT_TIMEOUT = 60
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
BASE_REPO, TESTER_REPO, DEPS_REPO = "rgbridge-base", "rgbridge-tester", "rgbridge-deps"
LABEL_RECIPE = "rgbridge.recipe"
LABEL_BUILD = "rgbridge.build"  # per-build token: lets a timeout find the build's RUN containers

LOG_TAIL_CHARS = 3000
INDEX_PROBE_TTL = 3600
_BUILD_DIR = "/tmp/rgbridge-build"


class DependencyInstallError(ScoringError):
    """pip could not install a requirements file (a deployment failure, never swallowed)."""

    def __init__(self, message: str, *, log_tail: str = "", timed_out: bool = False) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.timed_out = timed_out


@dataclass(frozen=True)
class DepsImage:
    tag: str
    cached: bool
    seconds: float
    log_tail: str = ""


@dataclass
class BuildResult:
    ok: bool
    tag: str
    seconds: float
    log_tail: str
    error: str = ""
    timed_out: bool = False
    #: a layer build in which pip itself installed something (not everything came from the cache)
    pip_installed: bool = False


# ----------------------------------------------------------------------------- small helpers


def _hash12(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _say(progress: ProgressFn | None, text: str) -> None:
    if progress is not None:
        progress(text)


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except ImageNotFound:
        return False


_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


@contextlib.contextmanager
def _build_lock(name: str) -> Iterator[None]:
    """Serialise builds of one thing across threads (a lock) and processes (flock)."""
    with _thread_locks_guard:
        tlock = _thread_locks.setdefault(name, threading.Lock())
    with tlock:
        lock_dir = cache_dir() / "locks"
        lock_dir.mkdir(exist_ok=True)
        with open(lock_dir / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------- host facts


def _parse_apt_sources() -> list[tuple[str, list[str]]]:
    """(URI, suites) pairs from the host's apt sources, deb822 and one-line formats."""
    entries: list[tuple[str, list[str]]] = []
    src_dir = Path("/etc/apt/sources.list.d")
    for path in sorted(src_dir.glob("*.sources")) if src_dir.is_dir() else []:
        for para in re.split(r"\n\s*\n", path.read_text(errors="replace")):
            fields: dict[str, str] = {}
            for line in para.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
                continue
            for uri in fields.get("uris", "").split():
                entries.append((uri, fields.get("suites", "").split()))
    lists = [Path("/etc/apt/sources.list")]
    lists += sorted(src_dir.glob("*.list")) if src_dir.is_dir() else []
    for path in lists:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            line = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
            if len(line) >= 3 and line[0] == "deb":
                entries.append((line[1], [line[2]]))
    return entries


def debian_source() -> tuple[str, str]:
    """(mirror URI, suite) for debootstrap: env overrides, else the host's apt sources."""
    suite = os.environ.get("RGBRIDGE_DEBIAN_SUITE", "").strip() or DEFAULT_SUITE
    mirror = os.environ.get("RGBRIDGE_DEBIAN_MIRROR", "").strip()
    if mirror:
        return mirror.rstrip("/"), suite
    for uri, suites in _parse_apt_sources():
        if suite in suites and uri.startswith(("http://", "https://", "file:/")):
            return uri.rstrip("/"), suite
    raise ScoringError(
        f"no apt source for Debian '{suite}' found in /etc/apt/sources.list(.d); "
        "set RGBRIDGE_DEBIAN_MIRROR to a Debian mirror URI"
    )


def host_extra_cas() -> list[tuple[str, bytes]]:
    """The host's locally added CA certificates (name, PEM), sorted: trusted in our images."""
    root = Path(os.environ.get("RGBRIDGE_EXTRA_CA_DIR", "") or HOST_CA_DIR)
    if os.environ.get("RGBRIDGE_TRUST_HOST_CAS", "1").lower() in ("0", "no", "false"):
        return []
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.rglob("*.crt")):
        if path.is_file():
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(path.relative_to(root)))
            out.append((name, path.read_bytes()))
    return out


_pip_settings: dict[str, str] | None = None


def host_pip_index_settings() -> dict[str, str]:
    """Index settings of the host's pip (env wins over ``pip config``), forwarded to builds.

    Only index location settings are forwarded: a custom or mirror index configured for the
    host is what builds should use too. Certificates are handled by CA trust in the image, and
    host paths (find-links) mean nothing inside a container.
    """
    global _pip_settings
    if _pip_settings is not None:
        return dict(_pip_settings)
    keys = {"index-url": "PIP_INDEX_URL", "extra-index-url": "PIP_EXTRA_INDEX_URL", "trusted-host": "PIP_TRUSTED_HOST"}
    found: dict[str, str] = {}
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in keys and value:
            found[keys[name]] = value.strip().strip("'\"")
    for env in keys.values():
        if os.environ.get(env):
            found[env] = os.environ[env]
    _pip_settings = found
    return dict(found)


# ----------------------------------------------------------------------------- base image


def base_recipe_hash() -> str:
    _, suite = debian_source()
    cas = [(name, hashlib.sha256(pem).hexdigest()) for name, pem in host_extra_cas()]
    return _hash12(
        "base", RECIPE_VERSION, suite, BASE_PACKAGES, cas, APP_UID, APP_GID, VENV, APP_DIRS, PIP_DEFAULT_TIMEOUT
    )


def base_image_tag() -> str:
    return f"{BASE_REPO}:{base_recipe_hash()}"


class CommandError(ScoringError):
    """A host command failed; ``output`` holds the tail of what it printed."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


def _run(
    cmd: Sequence[str],
    *,
    timeout: float,
    what: str,
    progress: ProgressFn | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run a host command, streaming lines to progress; ScoringError with the output tail."""
    tail: deque[str] = deque(maxlen=200)
    try:
        proc = subprocess.Popen(
            list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env
        )
    except FileNotFoundError as exc:
        raise ScoringError(f"{what}: command not found: {cmd[0]}") from exc
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip())
            _say(progress, line.rstrip())
        rc = proc.wait()
    finally:
        timer.cancel()
    if rc != 0:
        last = " | ".join(x for x in list(tail)[-4:] if x)
        why = f"timed out after {timeout:.0f}s" if rc == -9 else f"exit {rc}"
        raise CommandError(f"{what} failed ({why}): {last[-400:]}", "\n".join(tail))
    return "\n".join(tail)


def _chroot(root: Path, *args: str, progress: ProgressFn | None = None) -> None:
    env_cmd = ["chroot", str(root), "/usr/bin/env", "-i", f"PATH={SYSTEM_PATH}", "LANG=C.UTF-8", *args]
    _run(env_cmd, timeout=300, what=f"chroot {' '.join(args)}", progress=progress)


def _remove_tree(path: Path) -> None:
    """Delete a rootfs work dir, unmounting anything debootstrap left mounted inside it first
    (a killed debootstrap can leave proc/sys mounted; rmtree must never descend into those)."""
    prefix = str(path.resolve()) + "/"
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        mounts = []
    for mnt in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=30)
    try:
        still = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        still = []
    if any(m.startswith(prefix) for m in still):
        return  # leave it rather than delete through a mount
    shutil.rmtree(path, ignore_errors=True)


def _remove_stale_work_dirs(max_age: float = 7200) -> None:
    for old in cache_dir().glob("rootfs-*"):
        with contextlib.suppress(OSError):
            if old.is_dir() and time.time() - old.stat().st_mtime > max_age:
                _remove_tree(old)


def _build_rootfs(dest_tar: Path, progress: ProgressFn | None) -> None:
    if os.geteuid() != 0:
        raise ScoringError(
            "building the base image needs root (debootstrap and chroot); run `rgbridge images build` as root once"
        )
    if shutil.which("debootstrap") is None:
        raise ScoringError("debootstrap is not installed; run `apt-get install -y debootstrap`")
    mirror, suite = debian_source()
    _remove_stale_work_dirs()
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=cache_dir()))
    root = work / "root"
    try:
        _say(progress, f"debootstrap {suite} (minbase) from the host's apt mirror")
        _run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", suite, str(root), mirror],
            timeout=1800,
            what="debootstrap",
            progress=progress,
        )
        ca_dir = root / "usr/local/share/ca-certificates/rgbridge-host"
        ca_dir.mkdir(parents=True, exist_ok=True)
        for name, pem in host_extra_cas():
            (ca_dir / name).write_bytes(pem)
        _say(progress, "trusting host CA certificates; creating user and venv")
        _chroot(root, "update-ca-certificates", progress=progress)
        _chroot(root, "groupadd", "-g", str(APP_GID), APP_USER)
        _chroot(
            root,
            "useradd",
            "-u",
            str(APP_UID),
            "-g",
            str(APP_GID),
            "-m",
            "-d",
            f"/home/{APP_USER}",
            "-s",
            "/bin/bash",
            APP_USER,
        )
        _chroot(root, "/usr/bin/python3", "-m", "venv", VENV, progress=progress)
        for d in APP_DIRS:
            p = root / d.lstrip("/")
            p.mkdir(parents=True, exist_ok=True)
            os.chown(p, APP_UID, APP_GID)
            p.chmod(0o755)
        # Debian's pip reads the system bundle already; a pip upgraded inside a venv would
        # fall back to certifi and lose the host CAs, so pin the bundle in pip's global config.
        (root / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
        (root / "etc/rgbridge-release").write_text(f"recipe={base_recipe_hash()}\nsuite={suite}\n")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for child in (root / junk).glob("*"):
                if child.is_file():
                    child.unlink()
        _say(progress, "packing rootfs")
        partial = dest_tar.with_suffix(".partial")
        _run(
            ["tar", "--numeric-owner", "--one-file-system", "-C", str(root), "-cf", str(partial), "."],
            timeout=600,
            what="tar rootfs",
        )
        partial.replace(dest_tar)
    finally:
        _remove_tree(work)


def _base_changes(recipe: str) -> list[str]:
    return [
        f"ENV PATH={BASE_PATH}",
        f"ENV VIRTUAL_ENV={VENV}",
        "ENV LANG=C.UTF-8",
        "ENV PYTHONUNBUFFERED=1",
        "ENV PIP_DISABLE_PIP_VERSION_CHECK=1",
        "ENV PIP_NO_INPUT=1",
        f"ENV PIP_DEFAULT_TIMEOUT={PIP_DEFAULT_TIMEOUT}",
        "WORKDIR /repo",
        'CMD ["/bin/bash"]',
        f"LABEL {LABEL_OWNER}={OWNER_VALUE} {LABEL_KIND}=base {LABEL_RECIPE}={recipe}",
    ]


def ensure_base_image(client: docker.DockerClient, *, progress: ProgressFn | None = None, force: bool = False) -> str:
    """Tag of the base image, building it (rootfs cached under the cache dir) if missing."""
    recipe = base_recipe_hash()
    tag = f"{BASE_REPO}:{recipe}"
    if not force and image_exists(client, tag):
        return tag
    with _build_lock(f"base-{recipe}"):
        if not force and image_exists(client, tag):
            return tag
        tar_path = cache_dir() / "rootfs" / f"{recipe}.tar"
        tar_path.parent.mkdir(parents=True, exist_ok=True)
        if force or not tar_path.is_file():
            started = time.monotonic()
            _build_rootfs(tar_path, progress)
            _say(progress, f"rootfs built in {time.monotonic() - started:.0f}s")
        _say(progress, f"importing {tag}")
        try:
            client.api.import_image(src=str(tar_path), repository=BASE_REPO, tag=recipe, changes=_base_changes(recipe))
        except (APIError, DockerException) as exc:
            raise ScoringError(f"docker import of {tag} failed: {exc}") from exc
        if not image_exists(client, tag):
            raise ScoringError(f"docker import did not produce {tag}")
        return tag


# ----------------------------------------------------------------------------- official image

OFFICIAL_PYTHON = "python:3.10-slim"
_official_checked: dict[str, str | None] = {}


def official_python_image(
    client: docker.DockerClient, *, ref: str = OFFICIAL_PYTHON, pull_timeout: int = 20
) -> str | None:
    """``ref`` if present locally or pullable within a short timeout, else None (cached)."""
    if ref in _official_checked and _official_checked[ref] is not None:
        if image_exists(client, ref):
            return ref
    if image_exists(client, ref):
        _official_checked[ref] = ref
        return ref
    if ref in _official_checked:
        return _official_checked[ref]
    result: str | None = None
    try:
        # A separate short-timeout client from the same environment as get_client().
        quick = docker.from_env(timeout=pull_timeout)
        try:
            repo, _, tag = ref.rpartition(":")
            deadline = time.monotonic() + pull_timeout
            for _chunk in quick.api.pull(repo, tag=tag, stream=True, decode=True):
                if time.monotonic() > deadline:  # a slow pull counts as unavailable
                    break
            result = ref if image_exists(client, ref) else None
        finally:
            quick.close()
    except Exception:  # no registry, DNS failure, read timeout: all mean "not available"
        result = None
    _official_checked[ref] = result
    return result


# ----------------------------------------------------------------------------- building


def _tar_context(files: dict[str, bytes], dirs: dict[str, Path]) -> tempfile.SpooledTemporaryFile:
    ctx = tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024)
    with tarfile.open(fileobj=ctx, mode="w") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
        for arcdir, src in sorted(dirs.items()):
            for path in sorted(src.iterdir()):
                if path.is_file() and not path.is_symlink():
                    info = tar.gettarinfo(str(path), arcname=f"{arcdir}/{path.name}")
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mtime = 0
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
            if not any(src.iterdir()):
                info = tarfile.TarInfo(arcdir)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
    ctx.seek(0)
    return ctx


def _kill_build_containers(client: docker.DockerClient, token: str) -> None:
    try:
        found = client.containers.list(all=True, filters={"label": f"{LABEL_BUILD}={token}"})
    except DockerException:
        return
    for c in found:
        with contextlib.suppress(DockerException):
            c.kill()


def _remove_build_leftovers(client: docker.DockerClient, token: str) -> None:
    """Drop the intermediate images a failed legacy build keeps (newest first)."""
    with contextlib.suppress(DockerException):
        found = client.images.list(all=True, filters={"label": f"{LABEL_BUILD}={token}"})
        found.sort(key=lambda i: str(i.attrs.get("Created", "")), reverse=True)
        for img in found:
            if img.tags:
                continue
            with contextlib.suppress(DockerException):
                client.images.remove(img.id, force=False, noprune=False)


def docker_build(
    client: docker.DockerClient,
    *,
    dockerfile_body: str,
    base: str,
    tag: str,
    kind: str,
    files: dict[str, bytes] | None = None,
    dirs: dict[str, Path] | None = None,
    buildargs: dict[str, str] | None = None,
    timeout: float = 600,
    progress: ProgressFn | None = None,
) -> BuildResult:
    """Build ``FROM base`` + body with the legacy builder, with a real wall-clock limit.

    A LABEL with a per-build token comes first, so the RUN step containers carry it; on timeout
    those containers are killed, which ends the step and the build stream. Intermediate images
    of a failed build are dangling but labelled, so ``remove_images``/``sweep`` find them.
    """
    token = secrets.token_hex(8)
    args = dict(buildargs or {})
    arg_lines = "".join(f"ARG {k}\n" for k in sorted(args))
    # One LABEL step only: every legacy-builder step is a commit, slow on fuse-overlayfs.
    dockerfile = (
        f"FROM {base}\nLABEL {LABEL_OWNER}={OWNER_VALUE} {LABEL_KIND}={kind} "
        f"{LABEL_BUILD}={token}\n{arg_lines}{dockerfile_body.rstrip()}\n"
    )
    ctx_files = {"Dockerfile": dockerfile.encode(), **(files or {})}
    ctx = _tar_context(ctx_files, dirs or {})
    tail: deque[str] = deque(maxlen=400)
    state: dict[str, Any] = {"error": "", "image_id": None}
    started = time.monotonic()

    def consume() -> None:
        try:
            stream = client.api.build(
                fileobj=ctx,
                custom_context=True,
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                buildargs=args,
                timeout=max(int(timeout) + 120, 300),
            )
            for chunk in stream:
                if "stream" in chunk:
                    for line in str(chunk["stream"]).splitlines():
                        tail.append(line)
                        if line.strip():
                            _say(progress, line)
                if "aux" in chunk and isinstance(chunk["aux"], dict):
                    state["image_id"] = chunk["aux"].get("ID") or state["image_id"]
                if "error" in chunk or "errorDetail" in chunk:
                    msg = chunk.get("error") or chunk.get("errorDetail", {}).get("message", "")
                    state["error"] = str(msg).strip() or "build failed"
                    tail.append(state["error"])
        except Exception as exc:  # socket errors while the engine streams
            state["error"] = f"{type(exc).__name__}: {exc}"
            tail.append(state["error"])

    worker = threading.Thread(target=consume, name=f"build-{tag}", daemon=True)
    worker.start()
    worker.join(timeout)
    timed_out = worker.is_alive()
    if timed_out:
        deadline = time.monotonic() + 60
        while worker.is_alive() and time.monotonic() < deadline:
            _kill_build_containers(client, token)
            worker.join(2)
    ctx.close()
    seconds = time.monotonic() - started
    log_tail = "\n".join(tail)[-LOG_TAIL_CHARS:]
    if timed_out or state["error"]:
        _remove_build_leftovers(client, token)
    if timed_out:
        return BuildResult(False, tag, seconds, log_tail, f"build timed out after {timeout:.0f}s", timed_out=True)
    if state["error"] or not image_exists(client, tag):
        return BuildResult(False, tag, seconds, log_tail, state["error"] or "no image produced")
    return BuildResult(True, tag, seconds, log_tail)


# ----------------------------------------------------------------------------- index / wheels

_index_probe: dict[str, bool] = {}


def index_reachable_from_containers(client: docker.DockerClient, *, base: str | None = None, timeout: int = 45) -> bool:
    """Can pip in a bridge-networked container download from the index? Cached for an hour.

    ``RGBRIDGE_INDEX_FROM_CONTAINERS=1|0`` forces the answer.
    """
    forced = os.environ.get("RGBRIDGE_INDEX_FROM_CONTAINERS", "").lower()
    if forced in ("1", "yes", "true", "0", "no", "false"):
        return forced in ("1", "yes", "true")
    base = base or ensure_base_image(client)
    if base in _index_probe:
        return _index_probe[base]
    marker = cache_dir() / "index_probe.json"
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads(marker.read_text())
        if saved.get("base") == base and time.time() - saved.get("checked", 0) < INDEX_PROBE_TTL:
            _index_probe[base] = bool(saved["reachable"])
            return _index_probe[base]
    from bridge.scoring.containers import ContainerLimits, create_container, managed, wait_with_timeout

    cmd = [
        "timeout",
        str(timeout),
        "python",
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-cache-dir",
        "-q",
        "-d",
        "/tmp/probe",
        "six",
    ]
    name = f"rgbridge-index-probe-{secrets.token_hex(4)}"
    container = create_container(
        client,
        base,
        name=name,
        command=cmd,
        labels=make_labels(kind="probe"),
        env=host_pip_index_settings(),
        limits=ContainerLimits(user="0:0"),
        network_mode="bridge",
    )
    with managed(container):
        container.start()
        outcome = wait_with_timeout(container, timeout + 15)
    reachable = outcome.exit_code == 0
    _index_probe[base] = reachable
    with contextlib.suppress(OSError):
        marker.write_text(json.dumps({"base": base, "checked": time.time(), "reachable": reachable}))
    return reachable


class UnsafeRequirementError(DependencyInstallError):
    """A requirement the bridge refuses to install from (a local path; in wheelhouse mode,
    anything but a named requirement fetched as a binary wheel)."""


def check_requirements(requirements: str, *, host_fetch: bool = False) -> None:
    """Raise UnsafeRequirementError naming the first line that would install from a local path
    (``host_fetch``: the first line the host may not fetch as a binary wheel)."""
    check = reqfile.host_fetch_reason if host_fetch else reqfile.local_path_reason
    for line in reqfile.logical_lines(requirements):
        reason = check(line)
        if reason is not None:
            where = (
                "the host fetches binary wheels of named requirements only and never builds anything of the agent's"
                if host_fetch
                else "dependency layers are built from requirements.txt alone, so local folders "
                "and files cannot be installed"
            )
            raise UnsafeRequirementError(
                f"requirement refused: {reason}; {where}", log_tail=f"refused requirement line: {line}"
            )


def prepare_wheelhouse(
    requirements: str,
    dest: Path,
    *,
    timeout: float = 900,
    progress: ProgressFn | None = None,
    cache_index: Path | None = None,
) -> Path:
    """Download binary wheels for ``requirements`` with the host's pip into ``dest``.

    Only named requirements are accepted and only wheels are fetched (``--only-binary=:all:``):
    a local path, URL, VCS link, pip option or a package without a wheel is refused, so
    nothing of the agent's is ever built or run on the host. ``cache_index`` (the package cache's
    view's ``simple/`` folder) is offered as the last extra index, so for an identical file pip
    copies the cached one instead of downloading it, while choosing versions as without it.
    """
    check_requirements(requirements, host_fetch=True)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write(reqfile.normalise(requirements))
        req = fh.name
    pyver: list[str] = []
    if sys.version_info[:2] != (3, 11):
        pyver = ["--python-version", "3.11"]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-input",
        "--only-binary=:all:",
        *pyver,
        "-d",
        str(dest),
        "-r",
        req,
    ]
    env = None
    if cache_index is not None:
        extra = host_pip_index_settings().get("PIP_EXTRA_INDEX_URL", "")
        env = {**os.environ, "PIP_EXTRA_INDEX_URL": f"{extra} {cache_index.as_uri()}/".strip()}
    try:
        _run(cmd, timeout=timeout, what="pip download (binary wheels only)", progress=progress, env=env)
    except CommandError as exc:
        raise DependencyInstallError(
            f"{exc} (wheelhouse mode installs binary wheels only and never builds from source)",
            log_tail=exc.output[-LOG_TAIL_CHARS:],
        ) from exc
    finally:
        os.unlink(req)
    return dest


def _wheelhouse_digest(path: Path) -> str:
    entries = sorted((p.name, p.stat().st_size) for p in path.iterdir() if p.is_file())
    return _hash12("wheelhouse", entries)


def _resolve_wheelhouse(
    client: docker.DockerClient,
    base: str,
    requirements: str,
    wheelhouse: Path | str | None,
    key: str,
    progress: ProgressFn | None,
    timeout: float = 900,
) -> Path | None:
    """None = install from the index; else a directory to install from with --no-index."""
    if wheelhouse is not None:
        path = Path(wheelhouse).expanduser()
        if not path.is_dir():
            raise ScoringError(f"wheelhouse directory not found: {path}")
        return path
    if index_reachable_from_containers(client, base=base):
        return None
    _say(progress, "containers cannot reach the package index: downloading wheels on the host")
    dest = cache_dir() / "wheelhouse" / key
    return prepare_wheelhouse(requirements, dest, progress=progress, timeout=timeout)


def _install_step(venv_python: str, req_file: str, wheel_dir: str | None) -> str:
    opts = "--no-cache-dir --progress-bar off"
    if wheel_dir:
        opts += f" --no-index --find-links {wheel_dir}"
    return f"{venv_python} -m pip install {opts} -r {req_file}"


# ----------------------------------------------------------------------------- tester image


#: strict's pytest plugin (bridge/scoring/assets), installed into the tester venv: its content
#: is part of the tester recipe hash, so changing it builds a new tester image.
TESTER_PLUGIN = Path(__file__).resolve().parent / "assets" / "rgbridge_pytest_report.py"


def tester_image_tag(base: str) -> str:
    plugin = hashlib.sha256(TESTER_PLUGIN.read_bytes()).hexdigest()
    return f"{TESTER_REPO}:{_hash12('tester', base, TESTER_PINS, TESTER_VENV, plugin)}"


def ensure_tester_image(
    client: docker.DockerClient,
    *,
    wheelhouse: Path | str | None = None,
    progress: ProgressFn | None = None,
    timeout: float = 900,
) -> str:
    """Base + ``/opt/tester`` venv with ``TESTER_PINS``; /opt/tester/bin first on PATH."""
    base = ensure_base_image(client, progress=progress)
    tag = tester_image_tag(base)
    if image_exists(client, tag):
        return tag
    with _build_lock(tag):
        if image_exists(client, tag):
            return tag
        pins = "\n".join(TESTER_PINS) + "\n"
        wheels = _resolve_wheelhouse(client, base, pins, wheelhouse, f"tester-{tag[-12:]}", progress)
        dirs = {"build/wheels": wheels} if wheels else {}
        body = (
            f"COPY build {_BUILD_DIR}\n"
            f"RUN /usr/bin/python3 -m venv {TESTER_VENV} && "
            + _install_step(
                f"{TESTER_VENV}/bin/python",
                f"{_BUILD_DIR}/requirements.txt",
                f"{_BUILD_DIR}/wheels" if wheels else None,
            )
            + f' && {TESTER_VENV}/bin/python -c "import shutil, sysconfig; shutil.copy('
            f"'{_BUILD_DIR}/{TESTER_PLUGIN.name}', sysconfig.get_path('purelib'))\"" + f" && rm -rf {_BUILD_DIR}\n"
            f"ENV PATH={TESTER_PATH} VIRTUAL_ENV={TESTER_VENV}\n"
        )
        _say(progress, f"building {tag}")
        res = docker_build(
            client,
            dockerfile_body=body,
            base=base,
            tag=tag,
            kind="tester",
            files={"build/requirements.txt": pins.encode(), f"build/{TESTER_PLUGIN.name}": TESTER_PLUGIN.read_bytes()},
            dirs=dirs,
            buildargs=None if wheels else host_pip_index_settings(),
            timeout=timeout,
            progress=progress,
        )
        if not res.ok:
            raise DependencyInstallError(
                f"tester image build failed: {res.error}", log_tail=res.log_tail, timed_out=res.timed_out
            )
        return tag


# ----------------------------------------------------------------------------- deps image


def deps_image_tag(
    base: str, requirements: str, extra_packages: Sequence[str] = (), wheelhouse: Path | str | None = None
) -> str:
    mode = "auto" if wheelhouse is None else f"dir:{_wheelhouse_digest(Path(wheelhouse))}"
    key = _hash12("deps", DEPS_RECIPE_VERSION, base, reqfile.normalise(requirements), list(extra_packages), mode)
    return f"{DEPS_REPO}:{key}"


def _last_error_line(log: str) -> str:
    lines = [x.strip() for x in log.splitlines() if x.strip()]
    for line in reversed(lines):
        if line.startswith("ERROR:") or "error:" in line.lower():
            return line[:300]
    return lines[-1][:300] if lines else "no output"


# Layer builds: one container from the base image runs the install and is committed as the
# layer (one commit instead of a legacy build's per-step commits, each slow on fuse-overlayfs).
_LAYER_BUILD = "/tmp/rgbridge-build"
_LAYER_CACHE = "/opt/rgbridge-wheels"  # the wheel cache's view: read-only bind mount
_LAYER_OUTBOX = "/opt/rgbridge-outbox"  # a wheelhouse (no-network builds): read-only bind mount
# Given pip's own dry-run report, the wheel files pip would install (found in the package cache,
# sha256 checked against the report), linked into one folder and printed as name==version
# (installed by name from that folder, not by path, so no direct-URL record differs from pip's):
# exit 1 when pip would install anything else.
_PICK_WHEELS = f"""import hashlib, json, os, sys, urllib.parse
report = json.load(open(sys.argv[1]))
found = []
for item in report.get("install", []):
    info = item.get("download_info") or {{}}
    name = urllib.parse.unquote(info.get("url", "").split("#")[0].rsplit("/", 1)[-1])
    if item.get("is_direct") or not name.endswith(".whl") or "/" in name:
        sys.exit(1)
    archive = info.get("archive_info") or {{}}
    want = (archive.get("hashes") or {{}}).get("sha256") or archive.get("hash", "").partition("sha256=")[2]
    for folder in ("{_LAYER_CACHE}/flat",):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                if want and hashlib.sha256(fh.read()).hexdigest() != want:
                    continue
            os.makedirs("/tmp/rgbridge-chosen", exist_ok=True)
            os.symlink(path, os.path.join("/tmp/rgbridge-chosen", name))
            meta = item.get("metadata") or {{}}
            found.append(f"{{meta['name']}}=={{meta['version']}}")
            break
    else:
        sys.exit(1)
print("\\n".join(found))
"""
_LAYER_TOOLS = "/opt/rgbridge-tools"  # the uv binary: read-only bind mount
UV_VERSION = "0.13.9"
_uv_unavailable = False


def uv_tool() -> Path | None:
    """A folder holding the ``uv`` binary (from its wheel on the package index, fetched once by
    the host's pip as a binary wheel, sha256 checked at every use), or None: then layers install
    with pip alone. ``RGBRIDGE_INSTALLER=pip`` turns uv off."""
    global _uv_unavailable
    if _uv_unavailable or os.environ.get("RGBRIDGE_INSTALLER", "uv").lower() == "pip":
        return None
    import zipfile

    from bridge.scoring.pkgcache import sha256_file

    dest = cache_dir() / "tools" / f"uv-{UV_VERSION}"
    binary, stamp = dest / "uv", dest / "uv.sha256"

    def ready() -> bool:
        with contextlib.suppress(OSError):
            return binary.is_file() and sha256_file(binary) == stamp.read_text().strip()
        return False

    if ready():
        return dest
    with _build_lock("uv-tool"):
        if ready():
            return dest
        tmp = Path(tempfile.mkdtemp(prefix="uv-", dir=cache_dir()))
        try:
            _run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-input",
                    "--only-binary=:all:",
                    "--no-deps",
                    f"uv=={UV_VERSION}",
                    "-d",
                    str(tmp),
                ],
                timeout=300,
                what="pip download uv",
            )
            wheel = next(tmp.glob("uv-*.whl"))
            with zipfile.ZipFile(wheel) as zf:
                data = zf.read(f"uv-{UV_VERSION}.data/scripts/uv")
            dest.mkdir(parents=True, exist_ok=True)
            partial = dest / "uv.partial"
            partial.write_bytes(data)
            partial.chmod(0o755)
            os.replace(partial, binary)
            stamp.write_text(hashlib.sha256(data).hexdigest())
        except (ScoringError, OSError, StopIteration, KeyError, zipfile.BadZipFile):
            _uv_unavailable = True  # pip alone, for the rest of this process
            return None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest if ready() else None


def _host_fetch(requirements: str, dest: Path, cache_index: Path, timeout: float, cache: WheelCache) -> None:
    """Binary wheels for named requirements into ``dest`` with the host's pip (see
    ``prepare_wheelhouse``), then into the cache; ``dest`` is removed. Failures only mean the
    cache is not filled this time."""
    try:
        with contextlib.suppress(ScoringError, OSError):
            prepare_wheelhouse(requirements, dest, cache_index=cache_index, timeout=timeout)
            cache.import_dir(dest)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def _pip(args: str) -> str:
    return f"python -m pip {args} --progress-bar off"


def _layer_script(files: Sequence[str], *, mode: str) -> str:
    """The shell script of a layer build. ``mode``:

    * ``index`` (containers reach the index): pip's own dry run picks what to install, with the
      package cache offered as the last extra index (pip prefers the later index for an identical
      file, so a cached wheel is never downloaded again, while versions are chosen as without
      the cache). When every file picked is a wheel found in the cache, uv installs exactly those
      files (parallel, bytecode compiled); anything else is installed by pip itself.
    * ``local`` (no network): the cache and a wheelhouse only (``--no-index``).

    The build writes nothing on the host: the host fills the cache itself (``_HostFetch``).
    """
    reqs = [f"{_LAYER_BUILD}/{name}" for name in files]
    # The build files never reach the committed layer, whatever way the script ends; pip's HTTP
    # cache lives in /tmp for this build only (the install re-reads the pages the dry run read).
    scratch = "/tmp/rgbridge-pip /tmp/rgbridge-report.json /tmp/rgbridge-wheel-list /tmp/rgbridge-chosen"
    lines = [
        "set -u",
        f"trap 'rm -rf {_LAYER_BUILD} {scratch}' EXIT",
        f". {_LAYER_BUILD}/pip.env",
        "export PIP_CACHE_DIR=/tmp/rgbridge-pip",
        # phase times in build.log (where a slow layer build spends its time)
        'phase() { echo "RGBRIDGE_PHASE $1 $(date +%s.%N)"; }',
        "phase start",
    ]
    if mode == "local":
        lines.append(
            " && ".join(
                _pip(f"install --no-index --find-links {_LAYER_OUTBOX} --find-links {_LAYER_CACHE}/flat -r {r}")
                for r in reqs
            )
            + " || exit 1"
        )
        return "\n".join(lines) + "\n"
    cache_index = f"file://{_LAYER_CACHE}/simple/"
    lines += [
        f'export PIP_EXTRA_INDEX_URL="${{PIP_EXTRA_INDEX_URL:+$PIP_EXTRA_INDEX_URL }}{cache_index}"',
        "install_step() {",
        "  rm -rf /tmp/rgbridge-chosen",
        f"  if [ -x {_LAYER_TOOLS}/uv ] && "
        + _pip('install --dry-run --quiet --report /tmp/rgbridge-report.json -r "$1"')
        + f" && python3 {_LAYER_BUILD}/pick_wheels.py /tmp/rgbridge-report.json > /tmp/rgbridge-wheel-list; then",
        "    phase resolved; echo RGBRIDGE_INSTALLER=uv; [ -s /tmp/rgbridge-wheel-list ] || return 0",
        (
            f"    xargs -d '\\n' {_LAYER_TOOLS}/uv pip install --python \"$(command -v python)\" --no-deps --no-index"
            " --find-links /tmp/rgbridge-chosen --compile-bytecode --no-cache < /tmp/rgbridge-wheel-list && return 0"
        ),
        "  fi",
        "  echo RGBRIDGE_INSTALLER=pip; " + _pip('install -r "$1"'),
        "}",
        " && ".join(f"install_step {r}" for r in reqs) + " || exit 1",
        "phase installed",
    ]
    return "\n".join(lines) + "\n"


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


def _shell_env(values: dict[str, str]) -> str:
    import shlex

    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(values.items()))


def build_layer(
    client: docker.DockerClient,
    *,
    base: str,
    tag: str,
    kind: str,
    requirement_files: dict[str, str],
    mode: str,
    view: Path,
    wheels: Path | None,
    timeout: float = 600,
    progress: ProgressFn | None = None,
) -> BuildResult:
    """Run ``_layer_script`` in one container FROM ``base`` and commit it as ``tag``.

    ``view`` (the package cache) and ``wheels`` (a wheelhouse, ``local`` mode) are bind-mounted
    read-only: the build writes nothing on the host. No network in ``local`` mode.
    """
    from bridge.scoring.containers import (
        ContainerLimits,
        create_container,
        managed,
        put_directory,
        read_logs,
        wait_with_timeout,
    )

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rgbridge-layer-") as tmp:
        files_dir = Path(tmp)
        for name, text in requirement_files.items():
            (files_dir / name).write_text(text, encoding="utf-8")
        pip_env = {} if mode == "local" else host_pip_index_settings()
        (files_dir / "pip.env").write_text(_shell_env(pip_env), encoding="utf-8")
        (files_dir / "pick_wheels.py").write_text(_PICK_WHEELS, encoding="utf-8")
        (files_dir / "build.sh").write_text(_layer_script(list(requirement_files), mode=mode), encoding="utf-8")
        # --mount style binds: unlike -v ones they are not recorded as VOLUMEs by the commit.
        mounts = [docker.types.Mount(_LAYER_CACHE, str(view), type="bind", read_only=True)]
        if wheels is not None:
            mounts.append(docker.types.Mount(_LAYER_OUTBOX, str(wheels), type="bind", read_only=True))
        tools = uv_tool() if mode == "index" else None
        if tools is not None:
            mounts.append(docker.types.Mount(_LAYER_TOOLS, str(tools), type="bind", read_only=True))
        container = create_container(
            client,
            base,
            name=f"rgbridge-layer-{secrets.token_hex(5)}",
            command=["bash", f"{_LAYER_BUILD}/build.sh"],
            labels=make_labels(kind=f"{kind}-build"),
            # pip runs as root, as in a Dockerfile RUN; no capabilities, no new privileges
            limits=ContainerLimits(user="0:0", pids_limit=1024, nano_cpus=2_000_000_000),
            network_mode="none" if mode == "local" else "bridge",
            mounts=mounts,
        )
        with managed(container):
            put_directory(container, files_dir, _LAYER_BUILD, uid=0, gid=0)
            container.start()
            outcome = wait_with_timeout(container, max(5.0, timeout - (time.monotonic() - started)))
            log = read_logs(container)
            for line in log.splitlines():
                if line.strip():
                    _say(progress, line)
            tail = log[-LOG_TAIL_CHARS:]
            if outcome.timed_out:
                return BuildResult(
                    False,
                    tag,
                    time.monotonic() - started,
                    tail,
                    f"build timed out after {timeout:.0f}s",
                    timed_out=True,
                )
            if outcome.exit_code != 0:
                return BuildResult(False, tag, time.monotonic() - started, tail, f"install exited {outcome.exit_code}")
            repo, _, version = tag.rpartition(":")
            try:
                container.commit(repository=repo, tag=version, changes=_commit_changes(client, base, kind))
            except DockerException as exc:
                return BuildResult(False, tag, time.monotonic() - started, tail, f"docker commit failed: {exc}")
    return BuildResult(True, tag, time.monotonic() - started, tail, pip_installed="RGBRIDGE_INSTALLER=pip" in log)


def ensure_deps_image(
    client: docker.DockerClient,
    requirements: str,
    *,
    extra_packages: Sequence[str] = (),
    base: str | None = None,
    wheelhouse: Path | str | None = None,
    progress: ProgressFn | None = None,
    timeout: float = 600,
) -> DepsImage:
    """An image with ``requirements`` (then ``extra_packages``) installed in the active venv.

    The active venv is the first ``python`` on the base image's PATH (``/opt/venv`` for the base
    image). Blank requirements and no extras return the base image itself. Failures raise
    DependencyInstallError with pip's output tail; the limit is wall-clock over the build.
    Local-path requirements are refused (UnsafeRequirementError) before anything runs.

    Where the wheels come from: the host's package cache always (read-only), then the index
    (containers reach it) or a wheelhouse the host fetched (binary wheels only) or was given.
    Versions are chosen as pip alone would choose them (see ``_layer_script``).
    """
    base = base or ensure_base_image(client, progress=progress)
    reqs = reqfile.normalise(requirements)
    extras = [p.strip() for p in extra_packages if p.strip()]
    if not reqs and not extras:
        return DepsImage(tag=base, cached=True, seconds=0.0)
    check_requirements(reqs)
    tag = deps_image_tag(base, requirements, extras, wheelhouse)
    if image_exists(client, tag):
        return DepsImage(tag=tag, cached=True, seconds=0.0)
    started = time.monotonic()
    with _build_lock(tag):
        if image_exists(client, tag):
            return DepsImage(tag=tag, cached=True, seconds=time.monotonic() - started)
        extras_txt = "".join(f"{p}\n" for p in extras)
        files = {name: text for name, text in (("requirements.txt", reqs), ("extras.txt", extras_txt)) if text}
        if reqs and extras:
            # pip installs the requirements, then the extras into that environment: the first
            # step is exactly the requirements-only layer (strict's), so build on it.
            inner = ensure_deps_image(
                client, reqs, base=base, wheelhouse=wheelhouse, progress=progress, timeout=timeout
            )
            files = {"extras.txt": extras_txt}
        layer_base = inner.tag if reqs and extras else base
        cache = WheelCache()
        fetch_root = cache_dir() / "outbox"
        fetch_root.mkdir(parents=True, exist_ok=True)
        for stale in fetch_root.glob("build-*"):  # fetch folders of builds whose process died
            with contextlib.suppress(OSError):
                if time.time() - stale.stat().st_mtime > 86400:
                    shutil.rmtree(stale, ignore_errors=True)
        fetched = Path(tempfile.mkdtemp(prefix="build-", dir=fetch_root))
        text = "".join(files.values())

        def remaining() -> float:
            return max(5.0, timeout - (time.monotonic() - started))

        fetcher: threading.Thread | None = None
        try:
            with cache.view() as view:
                if wheelhouse is not None:
                    mode, wheels = "local", Path(wheelhouse).expanduser()
                    if not wheels.is_dir():
                        raise ScoringError(f"wheelhouse directory not found: {wheels}")
                elif index_reachable_from_containers(client, base=base):
                    mode, wheels = "index", None
                    if all(reqfile.host_fetch_reason(line) is None for line in reqfile.logical_lines(text)):
                        # The cache is filled by the host, never by the build: the host's pip
                        # fetches the same requirements as binary wheels (nothing of the agent's
                        # runs), alongside the build; what it gets serves later builds.
                        fetcher = threading.Thread(
                            target=_host_fetch,
                            daemon=True,
                            name=f"fetch-{tag}",
                            args=(text, fetched, view / "simple", remaining(), cache),
                        )
                        fetcher.start()
                else:
                    _say(progress, "containers cannot reach the package index: downloading binary wheels on the host")
                    prepare_wheelhouse(
                        text, fetched, cache_index=view / "simple", progress=progress, timeout=remaining()
                    )
                    cache.import_dir(fetched)
                    mode, wheels = "local", fetched
                res = build_layer(
                    client,
                    base=layer_base,
                    tag=tag,
                    kind="deps",
                    requirement_files=files,
                    mode=mode,
                    view=view,
                    wheels=wheels,
                    progress=progress,
                    timeout=remaining(),
                )
                if fetcher is not None and res.pip_installed:
                    # Something was not cached: wait, so the next build finds it. When everything
                    # came from the cache the fetch has nothing to add and finishes on its own.
                    fetcher.join(remaining())
            if res.ok:
                cache.evict()
        finally:
            if fetcher is None:
                shutil.rmtree(fetched, ignore_errors=True)
        if not res.ok:
            if res.timed_out:
                msg = f"dependency install timed out after {timeout:.0f}s"
            else:
                msg = f"dependency install failed: {_last_error_line(res.log_tail)}"
            raise DependencyInstallError(msg, log_tail=res.log_tail, timed_out=res.timed_out)
        return DepsImage(tag=tag, cached=False, seconds=time.monotonic() - started, log_tail=res.log_tail)


# ----------------------------------------------------------------------------- CLI helpers


def build_all(
    client: docker.DockerClient,
    *,
    progress: bool | ProgressFn = True,
    wheelhouse: Path | str | None = None,
    force: bool = False,
    console: Any = None,
) -> dict[str, Any]:
    """Build base + tester (``rgbridge images build``). ``progress=True`` shows a rich status."""
    timings: dict[str, float] = {}
    result: dict[str, Any] = {"timings": timings}

    def run(say: ProgressFn | None) -> None:
        t0 = time.monotonic()
        result["base"] = ensure_base_image(client, progress=say, force=force)
        timings["base"] = round(time.monotonic() - t0, 1)
        t1 = time.monotonic()
        result["tester"] = ensure_tester_image(client, wheelhouse=wheelhouse, progress=say)
        timings["tester"] = round(time.monotonic() - t1, 1)

    if callable(progress):
        run(progress)
    elif progress:
        from rich.console import Console

        con = console or Console(stderr=True)
        with con.status("building scoring images...") as status:

            def say(line: str) -> None:
                status.update(f"[bold]building scoring images[/] {line[:100]}")

            run(say)
        con.print(f"base   {result['base']}  ({timings['base']}s)")
        con.print(f"tester {result['tester']}  ({timings['tester']}s)")
    else:
        run(None)
    return result


@dataclass
class ImageInfo:
    tag: str
    id: str
    kind: str
    size_mb: float
    created: str
    labels: dict[str, str] = field(default_factory=dict)


def list_images(client: docker.DockerClient, *, include_dangling: bool = True) -> list[ImageInfo]:
    """Images labelled as ours (build intermediates included as ``<none>`` when dangling)."""
    out = []
    for img in client.images.list(all=include_dangling, filters={"label": owner_filter()}):
        labels = img.labels or {}
        tags = img.tags or ["<none>"]
        for tag in tags:
            out.append(
                ImageInfo(
                    tag=tag,
                    id=img.short_id,
                    kind=labels.get(LABEL_KIND, "?"),
                    size_mb=round(img.attrs.get("Size", 0) / 1e6, 1),
                    created=str(img.attrs.get("Created", "")),
                    labels=labels,
                )
            )
    return out


def remove_images(
    client: docker.DockerClient, *, kinds: Sequence[str] | None = None, keep: Sequence[str] = ()
) -> list[str]:
    """Remove our labelled images (optionally only some kinds); returns removed tags/ids.

    Children go first (deps/tester before base). Images in use by a container are skipped.
    """
    order = {"deps": 0, "deps-build": 0, "tester": 1, "tester-build": 1, "base": 2}
    images = client.images.list(all=True, filters={"label": owner_filter()})
    images.sort(key=lambda i: order.get((i.labels or {}).get(LABEL_KIND, ""), 0))
    removed = []
    for img in images:
        kind = (img.labels or {}).get(LABEL_KIND, "")
        if kinds is not None and kind not in kinds and kind.removesuffix("-build") not in kinds:
            continue
        if any(t in keep for t in img.tags):
            continue
        names = img.tags or [img.id]
        for name in names:
            try:
                client.images.remove(name, force=False, noprune=False)
                removed.append(name)
            except NotFound:
                pass
            except APIError:
                pass  # in use or has dependent children still referenced elsewhere
    return removed
