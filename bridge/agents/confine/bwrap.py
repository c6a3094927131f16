"""Bubblewrap: the agent in its own mount and PID namespaces, with only the allow-list of
bridge/agents/confine/binds.py mounted, every capability dropped, a new session (no terminal to
inject into) and `--die-with-parent`.

Process end: bwrap's init is PID 1 of the namespace; when it dies the kernel kills everything in
the namespace, whatever it did (setsid, double fork, nohup). The init dies when the agent's main
process exits, or when the outer bwrap dies (`--die-with-parent`). Ending an attempt is therefore:
SIGTERM to the processes inside (the grace), SIGKILL to the outer bwrap, wait until the init is
gone, then kill whatever the attempt's cgroup still holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from bridge.agents.confine.binds import BindPlan, plan
from bridge.agents.confine.cgroups import Cgroup, Meter, NamespaceWatch, make_cgroup, pid_namespace
from bridge.agents.confine.model import Confinement, SandboxError, required
from bridge.agents.confine.none import ProcessRunning

INFO_SECONDS = 30.0
GONE_SECONDS = 10.0
#: joins the cgroups named before `--`, then becomes bwrap: every process of the sandbox is
#: born inside the cgroup (moving bwrap in after it started would race its first fork)
JOIN = 'while [ "$1" != "--" ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'

ENABLE_USERNS = (
    "enable unprivileged user namespaces (sudo sysctl -w kernel.unprivileged_userns_clone=1 where that "
    "setting exists, and sudo sysctl -w user.max_user_namespaces=15000; on Ubuntu 23.10+ also "
    "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile allowing bwrap), "
    "or use --sandbox docker"
)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def bwrap_args(binds: BindPlan, cwd: Path) -> list[str]:
    """bwrap's options for a plan (everything before `--`, the info fd excepted)."""
    args = [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
    ]
    for name in binds.system:
        if os.path.islink(name):  # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(name), name]
        else:
            args += ["--ro-bind", name, name]
    for name in binds.etc:
        args += ["--ro-bind", name, name]
    # /proc/sys read-only: a uid-0 process writes sysctls by file mode alone, capabilities or not
    # (bwrap covers /proc/irq and /proc/bus itself, not /proc/sys in every setup)
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    # a fresh /tmp and /dev/shm (POSIX semaphores: multiprocessing) anyone inside may write
    args += ["--perms", "1777", "--tmpfs", "/dev/shm", "--perms", "1777", "--tmpfs", "/tmp"]
    read_only_last = []
    for path, op in binds.ordered():
        if op in ("ro", "rw"):
            args += ["--bind" if op == "rw" else "--ro-bind", str(path), str(path)]
        elif op == "mask_dir":  # writable while binds inside it are mounted, read-only after
            args += ["--tmpfs", str(path)]
            read_only_last += ["--remount-ro", str(path)]
        else:
            args += ["--ro-bind", "/dev/null", str(path)]
    args += read_only_last
    args += ["--chdir", str(cwd)]
    return args


def _gone(pid: int, namespace: str | None) -> bool:
    """The sandbox's init has exited (a zombie counts), or its pid now names another process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X") or pid_namespace(pid) != namespace


def _read_info(fd: int) -> dict[str, Any]:
    data = b""
    deadline = time.monotonic() + INFO_SECONDS
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        with contextlib.suppress(ValueError):
            found = json.loads(data)
            if isinstance(found, dict):
                return found
    return {}


def trial(runner: Sequence[str] = (), confinement: Confinement | None = None) -> None:
    """Run `true` under bwrap with an attempt's options (behind `runner`, e.g. `runuser -u U --`);
    SandboxError naming the fix when it fails."""
    path = bwrap_path()
    if path is None:
        raise SandboxError("bubblewrap is not installed: sudo apt-get install bubblewrap, or use --sandbox docker")
    if confinement is None:
        probe = Path(os.environ.get("TMPDIR", "/tmp"))
        confinement = Confinement(workspace=probe, home=probe, tmp=probe)
    argv = [*runner, path, *bwrap_args(plan(confinement), confinement.workspace), "--", "/bin/true"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"bubblewrap cannot run: {exc}; {ENABLE_USERNS}") from None
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["exit code " + str(out.returncode)])[-1][:300]
        raise SandboxError(f"bubblewrap cannot create its namespaces here ({why}): {ENABLE_USERNS}")


class BwrapRunning(ProcessRunning):
    def __init__(self, proc: subprocess.Popen[bytes], child: int, namespace: str | None, meter: Meter) -> None:
        super().__init__(proc, meter.kind)
        self.child = child  # bwrap's init in the sandbox, as this host sees it
        self.namespace = namespace  # its PID namespace (a reused pid is not it)
        self.meter = meter
        self._final: str | None = None
        self._closed = False

    def limit_hit(self) -> str | None:
        return self._final if self._closed else self.meter.limit_hit()

    def end(self, grace: float) -> int | None:
        if self.proc.poll() is None and grace > 0:
            outside = {self.proc.pid, self.child}
            for pid in self.meter.pids():
                if pid not in outside:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=GONE_SECONDS)
        deadline = time.monotonic() + GONE_SECONDS
        while self.child > 0 and not _gone(self.child, self.namespace) and time.monotonic() < deadline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.child, signal.SIGKILL)
            time.sleep(0.02)
        if not self._closed:
            self._final = self.meter.limit_hit()  # read before the cgroup goes
            self._closed = True
            self.meter.close()  # anything the namespace's end missed, then the cgroup itself
        return self.proc.returncode


class BwrapConfiner:
    kind = "bwrap"

    def __init__(self) -> None:
        self._version: str | None = None

    def version(self) -> str:
        if self._version is None:
            path = bwrap_path()
            out = ""
            if path:
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
            found = re.search(r"(\d+(?:\.\d+)+)", out)
            self._version = found.group(1) if found else "unknown"
        return self._version

    def check(self) -> None:
        """A trial run of `true` with the options every attempt uses."""
        trial()

    def describe(self, confinement: Confinement | None) -> dict[str, Any]:
        confinement = required(self.kind, confinement)
        return {
            "kind": self.kind,
            "version": self.version(),
            "binds": plan(confinement).as_dict(),
            "limits": confinement.limits.as_dict(),
        }

    def start(
        self, argv: list[str], *, env: dict[str, str], cwd: Path, stderr: IO[bytes], confinement: Confinement | None
    ) -> BwrapRunning:
        path = bwrap_path()
        if path is None:
            raise SandboxError("bubblewrap is not installed: sudo apt-get install bubblewrap, or use --sandbox docker")
        confinement = required(self.kind, confinement)
        binds = plan(confinement)
        cgroup: Cgroup | None = make_cgroup(confinement.limits)
        read_fd, write_fd = os.pipe()
        command = [path, *bwrap_args(binds, cwd), "--info-fd", str(write_fd), "--", *argv]
        if cgroup is not None:
            command = ["/bin/sh", "-c", JOIN, "rgbridge-cgroup", *map(str, cgroup.procs_files), "--", *command]
        try:
            proc = subprocess.Popen(  # argv from the adapter, no shell of ours around it
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
                pass_fds=(write_fd,),
            )
        except OSError as exc:
            if cgroup is not None:
                cgroup.close()
            raise SandboxError(f"bubblewrap did not start: {exc}") from None
        finally:
            os.close(write_fd)
        try:
            info = _read_info(read_fd)
        finally:
            os.close(read_fd)
        child = int(info.get("child-pid", 0) or 0)
        namespace = pid_namespace(child) if child else None
        if namespace is not None and namespace == pid_namespace(os.getpid()):
            namespace = None  # not the sandbox's init (it exited and its pid was reused already)
        meter: Meter = cgroup if cgroup is not None else NamespaceWatch(namespace or "", confinement.limits)
        return BwrapRunning(proc, child if namespace else 0, namespace, meter)
