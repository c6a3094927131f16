"""The base image's root filesystem, made with debootstrap and chroot on the host (needs root).

debootstrap runs in its two stages (``--foreign``, then ``--second-stage`` in the chroot) so that
dpkg installs without an fsync per file (``force-unsafe-io``, set only while it installs): the
tree becomes a tarball, never a booted system, and the packages and files are the same. Work for
another image can run in the new root beside the base's last steps (``Beside``: the tester venv),
kept out of the base's tarball."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bridge.errors import ScoringError
from bridge.locations import cache_dir
from bridge.scoring.images.base.build import say
from bridge.scoring.images.base.host import debian_source, host_extra_cas
from bridge.scoring.images.base.recipe import (
    APP_DIRS,
    APP_GID,
    APP_UID,
    APP_USER,
    BASE_PACKAGES,
    SYSTEM_PATH,
    VENV,
    base_recipe_hash,
)
from bridge.scoring.types import ProgressFn


class CommandError(ScoringError):
    """A host command failed; ``output`` holds the tail of what it printed."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


def run_command(
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
            say(progress, line.rstrip())
        rc = proc.wait()
    finally:
        timer.cancel()
    if rc != 0:
        last = " | ".join(x for x in list(tail)[-4:] if x)
        why = f"timed out after {timeout:.0f}s" if rc == -9 else f"exit {rc}"
        raise CommandError(f"{what} failed ({why}): {last[-400:]}", "\n".join(tail))
    return "\n".join(tail)


def chroot(root: Path, *args: str, progress: ProgressFn | None = None) -> None:
    env_cmd = ["chroot", str(root), "/usr/bin/env", "-i", f"PATH={SYSTEM_PATH}", "LANG=C.UTF-8", *args]
    run_command(env_cmd, timeout=300, what=f"chroot {' '.join(args)}", progress=progress)


def remove_tree(path: Path) -> None:
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
                remove_tree(old)


#: dpkg's setting file while debootstrap's second stage installs (removed before anything else)
_UNSAFE_IO = "etc/dpkg/dpkg.cfg.d/rgbridge-unsafe-io"


@dataclass(frozen=True)
class Beside:
    """Work in the new root beside the base's last steps and its packing: ``run(root)`` writes
    only inside ``folders`` (absolute paths in the root, made before it starts so that no folder
    the base's tarball holds changes while it is packed; the tarball leaves them out). Its
    failure is a line of progress, never the base's: the caller sees what ``run`` left."""

    folders: tuple[str, ...]
    run: Callable[[Path], None]


def _debootstrap(root: Path, suite: str, mirror: str, progress: ProgressFn | None) -> None:
    say(progress, f"debootstrap {suite} (minbase) from the host's apt mirror: download and unpack")
    run_command(
        [
            "debootstrap",
            "--foreign",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            suite,
            str(root),
            mirror,
        ],
        timeout=1800,
        what="debootstrap",
        progress=progress,
    )
    unsafe = root / _UNSAFE_IO
    unsafe.parent.mkdir(parents=True, exist_ok=True)
    unsafe.write_text("force-unsafe-io\n")
    say(progress, "debootstrap second stage: installing the packages (dpkg without an fsync per file)")
    run_command(
        ["chroot", str(root), "/debootstrap/debootstrap", "--second-stage"],
        timeout=1800,
        what="debootstrap --second-stage",
        progress=progress,
    )
    unsafe.unlink()


def _start_beside(beside: Beside | None, root: Path, progress: ProgressFn | None) -> threading.Thread | None:
    if beside is None:
        return None
    for folder in beside.folders:
        (root / folder.lstrip("/")).mkdir(parents=True, exist_ok=True)

    def run() -> None:
        try:
            beside.run(root)
        except (ScoringError, OSError) as exc:
            say(progress, f"beside the base build: {str(exc)[:300]}")

    thread = threading.Thread(target=run, name="rootfs-beside", daemon=True)
    thread.start()
    return thread


def build_rootfs(dest_tar: Path, progress: ProgressFn | None, *, beside: Beside | None = None) -> None:
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
    side: threading.Thread | None = None
    try:
        _debootstrap(root, suite, mirror, progress)
        side = _start_beside(beside, root, progress)
        ca_dir = root / "usr/local/share/ca-certificates/rgbridge-host"
        ca_dir.mkdir(parents=True, exist_ok=True)
        for name, pem in host_extra_cas():
            (ca_dir / name).write_bytes(pem)
        say(progress, "trusting host CA certificates; creating user and venv")
        chroot(root, "update-ca-certificates", progress=progress)
        chroot(root, "groupadd", "-g", str(APP_GID), APP_USER)
        chroot(
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
        chroot(root, "/usr/bin/python3", "-m", "venv", VENV, progress=progress)
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
        say(progress, "packing rootfs")
        partial = dest_tar.with_suffix(".partial")
        keep_out = [f"--exclude=./{folder.strip('/')}" for folder in (beside.folders if beside else ())]
        run_command(
            ["tar", "--numeric-owner", "--one-file-system", *keep_out, "-C", str(root), "-cf", str(partial), "."],
            timeout=600,
            what="tar rootfs",
        )
        partial.replace(dest_tar)
    finally:
        if side is not None:
            side.join()  # its result is in the root (or next to the tarball) until it ends
        remove_tree(work)
