"""Confined agent runs (bridge/agents/confine/, bridge/agents/confine/process.py): a hostile program run
through `run_agent` in each sandbox kind tries every reach an attempt must not have, and each is
refused; limits end the attempt as `resource_limit`; nothing of an attempt outlives it.

Real bubblewrap, real Docker (the bridge's base image): the docker cases carry the `docker`
marker. The `none` cases are the controls: the same attacks succeed unconfined, so the checks
can fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from bridge.agents.confine import (
    Confinement,
    Confiner,
    Limits,
    SandboxError,
    forget_probes,
    needs_of,
    needs_of_template,
    protected_defaults,
    ready_sandbox,
    sandbox_check,
    sandbox_for,
)
from bridge.agents.confine import cgroups as cgroups_mod
from bridge.agents.confine.binds import plan
from bridge.agents.confine.bwrap import BwrapConfiner, bwrap_args, trial
from bridge.agents.confine.none import NoConfiner
from bridge.agents.confine.process import Ended, run_agent

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "confine"
HOSTILE = FIXTURES / "hostile_agent.py"
GREEDY = FIXTURES / "greedy_agent.py"
SYSTEM_PYTHON = "/usr/bin/python3"
HAS_BWRAP = shutil.which("bwrap") is not None

needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed")


@dataclass
class World:
    """One attempt's folders and, beside them, what it must never reach."""

    root: Path
    workspace: Path
    home: Path
    tmp: Path
    tasks: Path
    golden: Path
    solution: Path
    recordings: Path
    agent_lib: Path  # an --agent-bind folder with a protected folder inside it
    masked_golden: Path
    secret: str

    def confinement(self, limits: Limits | None = None, read_only: tuple[Path, ...] = ()) -> Confinement:
        return Confinement(
            workspace=self.workspace,
            home=self.home,
            tmp=self.tmp,
            read_only=(FIXTURES, self.agent_lib, *read_only),
            protected=(self.tasks, self.recordings, self.masked_golden.parent),
            limits=limits or Limits(memory_bytes=512 * 2**20, pids=256, workspace_bytes=256 * 2**20),
        )


def _living_in(root: Path) -> list[int]:
    """Host pids whose environment names `root` (every process an attempt of the test started)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if str(root).encode() in environ:
                found.append(int(entry))
    return found


@pytest.fixture()
def world(tmp_path: Path) -> Iterator[World]:
    made = _make_world(tmp_path)
    yield made
    deadline = time.monotonic() + 5  # a process the test itself just killed takes a moment to go
    while (left := _living_in(made.root)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert left == [], "a process of the test's attempts outlived it"


def _make_world(tmp_path: Path) -> World:
    secret = "GOLDEN-" + secrets.token_hex(8)
    root = tmp_path
    attempt = root / "run" / "attempts" / "t1" / "a1"
    folders = {name: attempt / name for name in ("workspace", "home", "tmp")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    tasks = root / "tasks"
    name = secrets.token_hex(6)  # in file names; the secret is in their content only
    golden = tasks / "t1" / "tests" / f"golden_{name}.py"
    solution = tasks / "t1" / "solution" / f"solution_{name}.py"
    for path in (golden, solution):
        path.parent.mkdir(parents=True)
        path.write_text(f"# {secret}\n")
    recordings = root / "recordings"
    recordings.mkdir()
    agent_lib = root / "agent-venv"
    masked = agent_lib / "lib" / "rgbridge_tasks" / f"golden_masked_{name}.py"
    masked.parent.mkdir(parents=True)
    masked.write_text(f"# {secret}\n")
    (agent_lib / "lib" / "helper.py").write_text("VISIBLE = True\n")
    return World(
        root,
        folders["workspace"],
        folders["home"],
        folders["tmp"],
        tasks,
        golden,
        solution,
        recordings,
        agent_lib,
        masked,
        secret,
    )


@pytest.fixture(params=["bwrap", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Confiner]:
    if request.param == "bwrap":
        if not HAS_BWRAP:
            pytest.skip("bubblewrap is not installed")
        yield BwrapConfiner()
        return
    from bridge.agents.confine.docker import DockerConfiner, leftover_agent_containers

    client = request.getfixturevalue("docker_client")
    yield DockerConfiner(image=request.getfixturevalue("base_image"))
    assert leftover_agent_containers(client) == [], "an agent container outlived its attempt"


def _env(world: World) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(world.home),
        "TMPDIR": str(world.tmp),
        "LANG": "C.UTF-8",
    }


def _run(
    sandbox: Confiner,
    world: World,
    argv: list[str],
    confinement: Confinement,
    time_limit: float = 120,
    env: dict[str, str] | None = None,
) -> Ended:
    return run_agent(
        argv,
        env=env or _env(world),
        cwd=world.workspace,
        stdout=world.root / "stream.jsonl",
        stderr=world.root / "stderr.log",
        time_limit=time_limit,
        stop=threading.Event(),
        sandbox=sandbox,
        confinement=confinement,
    )


def _with_marker(marker: str) -> list[int]:
    """Host pids whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd:
            found.append(int(entry))
    return found


def _hostile_args(world: World, marker: str, host_tmp_file: Path) -> str:
    return json.dumps(
        {
            "secret": world.secret,
            "golden": str(world.golden),
            "solution": str(world.solution),
            "masked_golden": str(world.masked_golden),
            "names": [world.golden.name, world.solution.name, world.masked_golden.name],
            "recordings": str(world.recordings),
            "host_tmp_file": str(host_tmp_file),
            "read_only_dir": str(world.agent_lib),
            "host_pid": os.getpid(),
            "marker": marker,
            "workspace": str(world.workspace),
        }
    )


def _results(world: World) -> dict[str, dict[str, str]]:
    lines = (world.root / "stream.jsonl").read_text().splitlines()
    return {r["check"]: r for r in map(json.loads, lines)}


# --------------------------------------------------------------------------- the hostile agent


def test_hostile_agent_is_refused_every_reach(sandbox: Confiner, world: World) -> None:
    marker = "rgbridge-leftover-" + secrets.token_hex(6)
    host_tmp_file = Path("/tmp") / f"rgbridge-escape-{secrets.token_hex(6)}"
    try:
        ended = _run(
            sandbox,
            world,
            [SYSTEM_PYTHON, str(HOSTILE), _hostile_args(world, marker, host_tmp_file)],
            world.confinement(),
        )
        stderr = (world.root / "stderr.log").read_text()
        results = _results(world)
        assert ended.how == "exit" and ended.exit_code == 0, (ended, stderr)
        expected = {
            "golden_by_path",
            "solution_by_path",
            "golden_masked_under_bind",
            "walk_root_finds_golden",
            "write_recordings",
            "write_host_tmp",
            "write_read_only_bind",
            "docker_socket /var/run/docker.sock",
            "docker_socket /run/docker.sock",
            "signal_host_pid",
            "proc_shows_host",
            "left_behind_started",
            "write_sysctl",
        }
        assert expected <= set(results), (results, stderr)
        leaked = {k: v for k, v in results.items() if v["result"] not in ("refused", "host checks")}
        assert not leaked, leaked
        # the host's side of each refusal
        assert world.secret not in (world.root / "stream.jsonl").read_text()
        assert not (world.recordings / "forged.json").exists()
        assert not host_tmp_file.exists()
        assert not (world.agent_lib / "planted").exists()
        assert world.masked_golden.read_text() == f"# {world.secret}\n"  # masked, not removed
        assert (world.workspace / "done.txt").read_text() == "hostile done"
        assert _with_marker(marker) == [], "a process of the attempt outlived it"
        assert ended.confinement["kind"] == sandbox.kind
        assert str(world.masked_golden.parent) in ended.confinement["binds"]["masked"]
        assert str(world.workspace) in ended.confinement["binds"]["rw"]
    finally:
        for pid in _with_marker(marker):
            os.kill(pid, signal.SIGKILL)
        host_tmp_file.unlink(missing_ok=True)


def test_the_same_attacks_succeed_unconfined(world: World) -> None:
    """The control: under `--sandbox none` the checks above do see the leaks."""
    marker = "rgbridge-leftover-" + secrets.token_hex(6)
    host_tmp_file = Path("/tmp") / f"rgbridge-escape-{secrets.token_hex(6)}"
    args = json.loads(_hostile_args(world, marker, host_tmp_file))
    args["names"] = []  # walking the host's / takes minutes; the path reads show the leak
    try:
        ended = _run(NoConfiner(), world, [SYSTEM_PYTHON, str(HOSTILE), json.dumps(args)], world.confinement())
        results = _results(world)
        assert ended.how == "exit"
        for check in (
            "golden_by_path",
            "solution_by_path",
            "golden_masked_under_bind",
            "write_recordings",
            "signal_host_pid",
            "proc_shows_host",
        ):
            assert results[check]["result"] == "LEAKED", check
        assert host_tmp_file.exists()
        if os.geteuid() == 0:
            assert results["write_sysctl"]["result"] == "LEAKED"  # root writes kernel settings
        assert _with_marker(marker), "unconfined, the setsid'd sleeper survives (the reason for the sandbox)"
        assert ended.confinement["kind"] == "none"
    finally:
        for pid in _with_marker(marker):
            os.kill(pid, signal.SIGKILL)
        host_tmp_file.unlink(missing_ok=True)


def test_honest_agent_writes_its_workspace_home_and_tmp(sandbox: Confiner, world: World) -> None:
    # the virtual environment's interpreter: needs_of binds the venv and its base prefix
    python = Path(sys.executable)
    ended = _run(sandbox, world, [str(python), str(GREEDY), "honest"], world.confinement(read_only=needs_of(python)))
    assert (ended.how, ended.exit_code) == ("exit", 0), (world.root / "stderr.log").read_text()
    assert (world.workspace / "src" / "app.py").read_text() == "print('hello')\n"
    assert (world.home / "note").exists() and (world.tmp / "scratch").exists()
    assert not Path("/tmp/private").exists() or Path("/tmp/private").read_text() != "the sandbox's own /tmp\n"
    assert json.loads((world.root / "stream.jsonl").read_text()) == {"type": "result", "ok": True}
    assert ended.confinement["limits"]["pids"] == 256


# --------------------------------------------------------------------------- limits


def _limited(world: World, **overrides: int) -> Confinement:
    limits = Limits(memory_bytes=256 * 2**20, pids=64, workspace_bytes=32 * 2**20)
    return world.confinement(limits=replace(limits, **overrides))


@pytest.fixture(params=["cgroup", "watch"])
def meter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, sandbox: Confiner) -> str:
    """bwrap's limits by a cgroup (root here) or by the fallback watch (an unprivileged user
    without a delegated cgroup); Docker's are the engine's, one case."""
    if sandbox.kind == "docker" and request.param == "watch":
        pytest.skip("the engine enforces Docker's limits")
    if request.param == "watch":
        monkeypatch.setattr("bridge.agents.confine.bwrap.make_cgroup", lambda limits: None)
    elif sandbox.kind == "bwrap":
        probe = cgroups_mod.make_cgroup(Limits())
        if probe is None:
            pytest.skip("no writable cgroup here")
        probe.close()
    return str(request.param)


def _own_cgroups() -> list[Path]:
    """Cgroups this test process made (bridge/agents/confine/cgroups.py names them by pid)."""
    name = f"rgbridge-{os.getpid()}-*"
    patterns = [f"{'*/' * depth}{name}" for depth in range(1, 5)]
    return [p for pattern in patterns for p in Path("/sys/fs/cgroup").glob(pattern) if p.is_dir()]


@pytest.fixture(autouse=True)
def no_cgroup_left() -> Iterator[None]:
    yield
    assert _own_cgroups() == [], "an attempt's cgroup outlived it"


@pytest.mark.parametrize("what,limit", [("pids", "pids"), ("memory", "memory"), ("disk", "workspace_bytes")])
def test_a_limit_ends_the_attempt(sandbox: Confiner, world: World, meter: str, what: str, limit: str) -> None:
    started = time.monotonic()
    ended = _run(sandbox, world, [SYSTEM_PYTHON, str(GREEDY), what], _limited(world), time_limit=90)
    assert (ended.how, ended.limit) == ("resource_limit", limit), (ended, (world.root / "stderr.log").read_text())
    assert time.monotonic() - started < 80  # the limit ended it, not the time limit
    if sandbox.kind == "bwrap":
        assert (
            ended.confinement["enforced_by"] == "watch"
            if meter == "watch"
            else ended.confinement["enforced_by"] in ("cgroup1", "cgroup2")
        )
        assert _with_marker(str(GREEDY)) == []


def test_time_limit_and_stop_end_every_process(sandbox: Confiner, world: World) -> None:
    marker = "rgbridge-leftover-" + secrets.token_hex(6)
    sleeper = f"python3 -c 'import time; time.sleep(600)' {marker}"
    script = f"setsid {sleeper} & (nohup {sleeper} >/dev/null 2>&1 &); {sleeper}"
    ended = _run(sandbox, world, ["/bin/sh", "-c", script], world.confinement(), time_limit=3)
    assert ended.how == "time_limit"
    assert _with_marker(marker) == []
    stop = threading.Event()
    timer = threading.Timer(2.0, stop.set)
    timer.start()
    ended = run_agent(
        ["/bin/sh", "-c", script],
        env=_env(world),
        cwd=world.workspace,
        stdout=world.root / "s2",
        stderr=world.root / "e2",
        time_limit=120,
        stop=stop,
        sandbox=sandbox,
        confinement=world.confinement(),
    )
    timer.cancel()
    assert ended.how == "stopped"
    assert _with_marker(marker) == []


# --------------------------------------------------------------------------- units: binds, needs


def test_protected_paths_under_a_bind_are_masked_and_a_protected_bind_refused(world: World) -> None:
    binds = plan(world.confinement())
    masked = {m.path: m.is_dir for m in binds.masks}
    assert masked[world.masked_golden.parent] is True
    conf = world.confinement(read_only=(world.tasks,))
    with pytest.raises(SandboxError, match="protected"):
        plan(conf)
    # a protected file under a bind is masked by /dev/null; the docker sockets always count
    secret_file = world.agent_lib / "token.json"
    secret_file.write_text("{}")
    conf = replace(world.confinement(), protected=(secret_file,))
    assert {m.path: m.is_dir for m in plan(conf).masks}[secret_file] is False
    # a bind inside a protected folder shows only itself (the workspace lives in the run folder)
    conf = replace(world.confinement(), protected=(world.root / "run",))
    assert plan(conf).masks == ()
    args = bwrap_args(plan(world.confinement()), world.workspace)
    at = args.index(str(world.masked_golden.parent))
    assert args[at - 1] == "--tmpfs" and "--remount-ro" in args[at:]


def test_protected_defaults_name_the_bridges_own_folders(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RGBRIDGE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path / "cache"))
    found = protected_defaults()
    assert Path("/var/run/docker.sock") in found and Path("/run/docker.sock") in found
    assert tmp_path / "home" in found and tmp_path / "cache" in found and tmp_path / "home" / "recordings" in found
    from bridge.locations import shipped_tasks_dir

    assert shipped_tasks_dir() in found


def test_a_wheel_installed_tasks_folder_under_usr_is_masked(tmp_path: Path) -> None:
    """The shipped tasks of a wheel sit in site-packages, under a system folder every sandbox binds."""
    site = Path("/usr/local/lib")
    if not os.access(site, os.W_OK):
        pytest.skip("/usr/local/lib is not writable here (needs root)")
    top = site / f"rgbridge-test-{secrets.token_hex(4)}"
    fake = top / "site-packages" / "rgbridge_tasks"
    fake.mkdir(parents=True)
    try:
        (fake / "golden.py").write_text("SECRET\n")
        folders = [tmp_path / n for n in ("w", "h", "t")]
        for f in folders:
            f.mkdir()
        conf = Confinement(*folders, protected=(fake,))
        assert fake in {m.path for m in plan(conf).masks}
        if HAS_BWRAP:
            out = subprocess.run(
                ["bwrap", *bwrap_args(plan(conf), folders[0]), "--", "/bin/ls", "-A", str(fake)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0 and out.stdout.strip() == "", out
    finally:
        shutil.rmtree(top)


def test_needs_of_the_real_clis_and_interpreters(tmp_path: Path) -> None:
    venv_python = Path(sys.executable)
    needs = needs_of(venv_python)
    assert Path(sys.prefix) in needs  # the virtual environment
    assert Path(sys.base_prefix).resolve() in {p.resolve() for p in needs} or Path(sys.base_prefix) == Path("/usr")
    assert needs_of(Path("/bin/sh")) == ()  # system: bound anyway
    try:
        import claude_agent_sdk
    except ImportError:
        claude_agent_sdk = None
    if claude_agent_sdk is not None:
        claude = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
        if claude.exists():
            # a single binary: itself, not its package (and, reached through a linked folder, as
            # the full suite's second run reaches its copy's linked .venv, the link's target too)
            needs_claude = needs_of(claude)
            assert claude in needs_claude and {p.resolve() for p in needs_claude} == {claude.resolve()}
    try:
        import codex_cli_bin
    except ImportError:
        codex_cli_bin = None
    if codex_cli_bin is not None:
        package = Path(codex_cli_bin.__file__).parent
        needs_codex = needs_of(package / "bin" / "codex")  # it runs its siblings (rg, resources)
        assert package in needs_codex and {p.resolve() for p in needs_codex} == {package.resolve()}
    # a script: itself and its interpreter through /usr/bin/env
    script = tmp_path / "agent.py"
    script.write_text("#!/usr/bin/env python3\nprint(1)\n")
    script.chmod(0o755)
    bindir = tmp_path / "prefix" / "bin"
    bindir.mkdir(parents=True)
    (tmp_path / "prefix" / "lib" / "python3.11").mkdir(parents=True)
    os.symlink(venv_python, bindir / "python3")
    found = needs_of(script, search_path=str(bindir))
    assert script in found and tmp_path / "prefix" in found
    # a CLI in ~/.local/bin (a link into ~/.local/share, as native installers do) brings its
    # files only, never ~/.local (the user's data, keyrings, the bridge's own data home)
    local = tmp_path / "home" / ".local"
    version = local / "share" / "tool" / "versions" / "1.0"
    version.parent.mkdir(parents=True)
    version.write_text("#!/bin/sh\n")
    (local / "bin").mkdir()
    (local / "lib" / "python3.11").mkdir(parents=True)
    os.symlink(version, local / "bin" / "tool")
    assert needs_of(local / "bin" / "tool") == (local / "bin" / "tool", version)
    # the command adapter's template: the program, what it needs, and the absolute paths it names
    words = ["python3", str(script), "--mcp", "{mcp_config}", "/nonexistent/x"]
    template = needs_of_template(words, search_path=str(bindir))
    assert script in template and tmp_path / "prefix" in template
    assert Path("/nonexistent/x") not in template
    with pytest.raises(SandboxError):
        needs_of(Path("no-such-program-here"), search_path=str(bindir))


# --------------------------------------------------------------------------- choosing, probing


@needs_bwrap
def test_auto_picks_bwrap_here_and_doctor_says_so() -> None:
    assert sandbox_for("auto").kind == "bwrap"
    check = sandbox_check()
    assert check.ok and "bwrap" in check.detail
    with pytest.raises(SandboxError):
        sandbox_for("chroot")


@pytest.fixture()
def fresh_probes() -> Iterator[None]:
    forget_probes()
    yield
    forget_probes()


def test_no_working_sandbox_is_refused_with_the_fixes(monkeypatch: pytest.MonkeyPatch, fresh_probes: None) -> None:
    from bridge.agents.confine.docker import DockerConfiner

    monkeypatch.setattr("bridge.agents.confine.bwrap.bwrap_path", lambda: None)
    with pytest.raises(SandboxError, match="apt-get install bubblewrap"):
        BwrapConfiner().check()

    def no_image(self: DockerConfiner) -> None:
        raise SandboxError("--sandbox docker: the base image is missing; run: rgbridge images build")

    monkeypatch.setattr(DockerConfiner, "check", no_image)
    check = sandbox_check()
    assert not check.ok and check.severity == "warning"
    assert "apt-get install bubblewrap" in check.fix and "rgbridge images build" in check.fix
    with pytest.raises(SandboxError, match="--sandbox none"):
        sandbox_for("auto")
    with pytest.raises(SandboxError, match="apt-get install bubblewrap"):
        ready_sandbox("bwrap")  # the run's pre-flight, before any agent runs
    assert ready_sandbox("none").kind == "none"


@needs_bwrap
def test_doctor_prints_the_sandbox_line(fresh_probes: None) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bridge.cli", "doctor", "--json", "--no-index"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        timeout=300,
    )
    line = next(c for c in json.loads(out.stdout)["checks"] if c["name"] == "sandbox")
    assert line["ok"] and "uses bwrap" in line["detail"], line


@needs_bwrap
def test_unprivileged_user_runs_bwrap_or_is_told_the_fix(unprivileged_user: str) -> None:
    uid = pwd.getpwnam(unprivileged_user).pw_uid
    base = Path(tempfile.mkdtemp(prefix="rgbridge-unpriv-", dir="/tmp"))  # pytest's tmp is root's only
    try:
        os.chmod(base, 0o755)
        folders = [base / n for n in ("w", "h", "t")]
        for folder in folders:
            folder.mkdir()
            os.chown(folder, uid, -1)
        conf = Confinement(*folders)
        runner = ["runuser", "-u", unprivileged_user, "--"]
        try:
            trial(runner, conf)
        except SandboxError as exc:  # user namespaces off here: the message names the fix
            assert "user.max_user_namespaces" in str(exc) and "--sandbox docker" in str(exc)
            return
        out = subprocess.run(
            [
                *runner,
                "bwrap",
                *bwrap_args(plan(conf), folders[0]),
                "--",
                "/bin/sh",
                "-c",
                "id -u; echo ok > file; touch /tmp/x /dev/shm/y && ls /proc | grep -c '^[0-9]'",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        uid_seen, processes = out.stdout.split()
        assert uid_seen == str(uid) and int(processes) <= 5  # its own PID namespace: init, sh, ls, grep
        assert (folders[0] / "file").read_text() == "ok\n"
        # a whole attempt as that user: no cgroup is writable, the namespace watch ends a fork bomb
        site = sysconfig.get_paths()["purelib"]
        system = subprocess.run(
            [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True
        )
        # asked as that user: root may read what the user cannot (a venv under a 0700 folder)
        readable = subprocess.run([*runner, "test", "-r", f"{site}/pydantic/__init__.py"], check=False)
        if system.stdout.strip() != str(tuple(sys.version_info[:2])) or readable.returncode != 0:
            pytest.skip("the system's python3 cannot import this environment's packages as that user")
        # The checkout may sit in a folder that user cannot read (a clone under a 0700 folder):
        # the fixtures and the bridge it imports are copied where it can (`base` is 0755).
        fixtures, src = base / "fixtures", base / "src"
        shutil.copytree(FIXTURES, fixtures)
        shutil.copytree(REPO_ROOT / "bridge", src / "bridge", ignore=shutil.ignore_patterns("__pycache__"))
        subprocess.run(["chmod", "-R", "a+rX", str(fixtures), str(src)], check=True)
        out = subprocess.run(
            [
                *runner,
                "env",
                f"PYTHONPATH={src}:{site}",
                SYSTEM_PYTHON,
                str(fixtures / "run_as_user.py"),
                str(base),
                "pids",
                str(fixtures),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.stdout.split() == ["resource_limit", "pids", "bwrap", "watch"], out.stdout + out.stderr
        left = subprocess.run(["pgrep", "-u", unprivileged_user], capture_output=True, text=True)
        assert left.stdout.strip() == "", "a process of the user's attempt outlived it"
    finally:
        shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- the real Claude Code


@pytest.mark.agent_cli
def test_claude_code_runs_confined_and_its_bash_is_refused(sandbox: Confiner, world: World, agent_cli) -> None:
    """The real Claude Code CLI in the sandbox, driven by the scripted model on loopback: its
    Bash tool reads the golden file by path, walks for it, writes outside and leaves a sleeper;
    the CLI works (its stream, a file in the workspace) and every reach comes back refused."""
    from tests.agent_clis import CLAUDE_QUIET_ENV
    from tests.scripted_model import Call, Calls, Conversation, Reply, ScriptedModel

    claude = agent_cli("claude")
    marker = "rgbridge-leftover-" + secrets.token_hex(6)
    script = (
        f"cat {world.golden} || echo GOLDEN-REFUSED; "
        f"find / -name {world.golden.name} -not -path '/proc/*' 2>/dev/null | head -3; echo WALKED; "
        f"echo forged > {world.recordings}/forged.json || echo RECORDINGS-REFUSED; "
        f"(setsid nohup python3 -c 'import time; time.sleep(600)' {marker} >/dev/null 2>&1 &); "
        "echo made-by-bash > proof.txt; echo BASH-DONE"
    )

    def policy(conv: Conversation) -> Calls | Reply:
        if not conv.calls_to("Bash"):
            return Calls((Call("Bash", {"command": script, "description": "try"}),))
        return Reply("done")

    mcp = world.home / "mcp.json"
    mcp.write_text('{"mcpServers": {}}')
    with ScriptedModel(policy) as model:
        env = {
            **_env(world),
            **CLAUDE_QUIET_ENV,
            "ANTHROPIC_BASE_URL": model.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-scripted-test-key",
            "IS_SANDBOX": "1",
        }
        argv = [
            str(claude), "-p", "try the sandbox", "--output-format", "stream-json", "--verbose",
            "--mcp-config", str(mcp), "--strict-mcp-config", "--allowedTools", "Bash", "Write", "Read",
            "--permission-mode", "acceptEdits", "--no-session-persistence",
        ]  # fmt: skip
        try:
            confinement = world.confinement(read_only=needs_of(claude))
            ended = _run(sandbox, world, argv, confinement, time_limit=240, env=env)
        finally:
            for pid in _with_marker(marker):
                os.kill(pid, signal.SIGKILL)
        results = [r for r in model.agent_requests() if r.conversation and r.conversation.calls_to("Bash")]
    stream = (world.root / "stream.jsonl").read_text()
    assert ended.how == "exit" and ended.exit_code == 0, (ended, (world.root / "stderr.log").read_text()[-2000:])
    assert results, "the scripted model never saw its Bash call's result"
    output = results[-1].conversation.calls_to("Bash")[-1].text  # type: ignore[union-attr]
    assert "BASH-DONE" in output and "GOLDEN-REFUSED" in output and "RECORDINGS-REFUSED" in output, output
    assert world.secret not in output and world.secret not in stream
    assert world.golden.name not in output.split("WALKED")[0].split("GOLDEN-REFUSED")[-1]  # the walk found nothing
    assert (world.workspace / "proof.txt").read_text() == "made-by-bash\n"
    assert not (world.recordings / "forged.json").exists()
    assert _with_marker(marker) == []


@pytest.mark.agent_cli
def test_codex_runs_confined_and_its_shell_is_refused(sandbox: Confiner, world: World, agent_cli) -> None:
    """The real Codex CLI in the sandbox: its shell tool runs, writes the workspace, and cannot
    read the golden file. Codex's own sandbox cannot nest in ours (its bubblewrap, run as uid 0
    without capabilities, fails "setting up uid map"; Docker's seccomp refuses user namespaces),
    so a confined Codex runs with its own sandbox off, as Harbor runs it in its containers."""
    from tests.agent_clis import codex_command, codex_config
    from tests.scripted_model import Calls, Conversation, Reply, ScriptedModel, _shell_call, _shell_tool

    codex = agent_cli("codex")
    marker = "rgbridge-leftover-" + secrets.token_hex(6)
    script = (
        f"cat {world.golden} || echo GOLDEN-REFUSED; "
        f"(setsid nohup python3 -c 'import time; time.sleep(600)' {marker} >/dev/null 2>&1 &); "
        "echo made-by-shell > proof.txt; echo SHELL-DONE"
    )

    def policy(conv: Conversation) -> Calls | Reply:
        shell = _shell_tool(conv)
        if shell is None or conv.calls_to(shell):
            return Reply("done")
        return Calls((_shell_call(conv, shell, script, str(world.workspace)),))

    codex_home = world.home / "codex"
    codex_home.mkdir()
    with ScriptedModel(policy) as model:
        server = {"command": "/bin/true", "args": [], "env": {}}
        config = codex_config(model.openai_base_url, server)
        assert 'sandbox_mode = "workspace-write"' in config
        config = config.replace('sandbox_mode = "workspace-write"', 'sandbox_mode = "danger-full-access"')
        # no bridge here (/bin/true stands in for its server): the writer marks our server
        # required, which would end Codex before its shell ran
        assert "required = true" in config
        config = config.replace("required = true", "required = false")
        (codex_home / "config.toml").write_text(config)
        env = {**_env(world), "CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "sk-scripted-test-key"}
        confinement = world.confinement(read_only=needs_of(codex))
        try:
            ended = _run(
                sandbox, world, codex_command(codex, "try the sandbox", world.workspace), confinement, 240, env
            )
        finally:
            for pid in _with_marker(marker):
                os.kill(pid, signal.SIGKILL)
        outputs = [r.text for r in model.agent_requests() if r.conversation for r in r.conversation.history]
    stream = (world.root / "stream.jsonl").read_text()
    assert ended.how == "exit" and ended.exit_code == 0, (ended, (world.root / "stderr.log").read_text()[-2000:])
    output = "\n".join(outputs)
    assert "SHELL-DONE" in output and "GOLDEN-REFUSED" in output, (output, stream[-2000:])
    assert world.secret not in output and world.secret not in stream
    assert (world.workspace / "proof.txt").read_text() == "made-by-shell\n"
    assert _with_marker(marker) == []


def test_confinement_for_an_attempt(world: World, tmp_path: Path) -> None:
    from bridge.agents.confine import confinement_for

    script = tmp_path / "my_agent.py"
    script.write_text("print('hi')\n")
    conf = confinement_for(
        workspace=world.workspace,
        home=world.home,
        tmp=world.tmp,
        program=[sys.executable, str(script), "--mcp", "{mcp_config}"],
        agent_binds=[world.agent_lib],
        protected=[world.tasks],
    )
    assert script in conf.read_only and world.agent_lib in conf.read_only and Path(sys.prefix) in conf.read_only
    assert world.tasks in conf.protected and Path("/var/run/docker.sock") in conf.protected
    assert conf.limits == Limits()
    with pytest.raises(SandboxError, match="--agent-bind"):
        confinement_for(
            workspace=world.workspace, home=world.home, tmp=world.tmp, program=["/bin/sh"],
            agent_binds=[tmp_path / "missing"],
        )  # fmt: skip
    with pytest.raises(SandboxError, match="protected"):  # an --agent-bind naming the tasks
        plan(confinement_for(
            workspace=world.workspace, home=world.home, tmp=world.tmp, program=["/bin/sh"],
            agent_binds=[world.tasks], protected=[world.tasks],
        ))  # fmt: skip


def test_cgroups_of_a_dead_bridge_are_swept() -> None:
    made = cgroups_mod.make_cgroup(Limits())
    if made is None:
        pytest.skip("no writable cgroup here")
    made.close()
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout.strip()
    ghosts = [folder.parent / f"rgbridge-{dead}-deadbeef" for folder in made.dirs.values()]
    for ghost in ghosts:
        ghost.mkdir()
    again = cgroups_mod.make_cgroup(Limits())
    assert again is not None
    again.close()
    assert not any(ghost.exists() for ghost in ghosts)


def test_a_fast_exit_keeps_all_its_output(sandbox: Confiner, world: World) -> None:
    """A CLI that fails at once still leaves its stdout and stderr, a last line without its
    newline included (Docker's output is attached before the container starts: following its
    logs lost that line)."""
    script = "echo out-line; printf out-end; echo err-line >&2; printf err-end >&2; exit 3"
    for _ in range(3):
        ended = _run(sandbox, world, ["/bin/sh", "-c", script], world.confinement())
        assert (ended.how, ended.exit_code) == ("exit", 3)
        assert (world.root / "stream.jsonl").read_text() == "out-line\nout-end"
        assert (world.root / "stderr.log").read_text() == "err-line\nerr-end"


@pytest.mark.docker
def test_docker_check_runs_a_trial_container(docker_client: object, base_image: str, fresh_probes: None) -> None:
    from bridge.agents.confine.docker import DockerConfiner, leftover_agent_containers

    DockerConfiner(image=base_image).check()  # raises when the engine cannot see this machine's files
    assert leftover_agent_containers(docker_client) == []  # type: ignore[arg-type]


def test_disk_usage_follows_no_symlink_and_counts_hard_links_once(tmp_path: Path) -> None:
    from bridge.agents.confine.usage import disk_usage

    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "data.bin").write_bytes(os.urandom(1024 * 1024))
    alone = disk_usage([root])
    assert 1024 * 1024 <= alone < 2 * 1024 * 1024
    os.symlink("/usr", root / "usr-link")  # gigabytes, if it were followed
    os.link(root / "sub" / "data.bin", root / "again.bin")
    assert disk_usage([root]) < alone + 64 * 1024
    assert disk_usage([root, root / "sub"]) < alone + 64 * 1024  # the same files through two roots


def test_an_error_in_the_run_still_ends_the_attempt(
    sandbox: Confiner, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = "rgbridge-leftover-" + secrets.token_hex(6)

    class Broken:
        def __init__(self, *args: object) -> None:
            pass

        def __enter__(self) -> None:
            raise RuntimeError("the watch broke")

        def __exit__(self, *exc: object) -> None:
            pass

    monkeypatch.setattr("bridge.agents.confine.process.DiskWatch", Broken)
    try:
        with pytest.raises(RuntimeError, match="the watch broke"):
            _run(
                sandbox,
                world,
                ["/bin/sh", "-c", f"exec python3 -c 'import time; time.sleep(600)' {marker}"],
                world.confinement(),
            )
        assert _with_marker(marker) == []
    finally:
        for pid in _with_marker(marker):
            os.kill(pid, signal.SIGKILL)


def test_cgroup_v2_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cgroup v2 (this machine's memory and pids controllers are on v1, so a fake tree): the
    attempt's cgroup is made under ours, the controllers enabled for it, its limits written, and
    its event counters read back as the limit hit."""
    root = tmp_path / "unified"
    own = root / "user.slice" / "bridge.scope"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    monkeypatch.setattr(cgroups_mod, "_mounts", lambda: [("/", str(root), "cgroup2", "rw")])
    monkeypatch.setattr(cgroups_mod, "_own_cgroups", lambda: {"": "/user.slice/bridge.scope"})
    made = cgroups_mod._make_v2("rgbridge-1-test", Limits(memory_bytes=123, pids=45))
    assert made is not None and made.kind == "cgroup2"
    folder = own / "rgbridge-1-test"
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (folder / "memory.max").read_text() == "123" and (folder / "pids.max").read_text() == "45"
    assert made.procs_files == [folder / "cgroup.procs"]
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
    (folder / "pids.events").write_text("max 0\n")
    assert made.limit_hit() is None  # reclaim at the limit is not an OOM kill
    (folder / "pids.events").write_text("max 2\n")
    assert made.limit_hit() == "pids"
    (folder / "memory.events").write_text("oom 1\noom_kill 1\n")
    assert made.limit_hit() == "memory"
    # a cgroup without the controllers (v1 holds them): no v2 cgroup
    (own / "cgroup.controllers").write_text("cpu\n")
    assert cgroups_mod._make_v2("rgbridge-1-other", Limits()) is None


def test_a_bind_holding_the_masked_run_folder_keeps_the_workspace(sandbox: Confiner, world: World) -> None:
    """`--agent-bind` of a folder that holds the run folder (protected) and the tasks: both are
    masked, and the workspace inside the masked run folder is still there and writable."""
    conf = replace(
        world.confinement(),
        read_only=(FIXTURES, world.root),
        protected=(world.tasks, world.recordings, world.root / "run"),
    )
    probe = (
        "import os, sys; "
        f"open('written.txt', 'w').write('ok'); "
        f"print(sorted(os.listdir({str(world.root / 'run')!r}))); "
        f"print(os.path.exists({str(world.golden)!r}), os.path.exists({str(world.tasks)!r}))"
    )
    ended = _run(sandbox, world, [SYSTEM_PYTHON, "-c", probe], conf)
    assert (ended.how, ended.exit_code) == ("exit", 0), (world.root / "stderr.log").read_text()
    assert (world.workspace / "written.txt").read_text() == "ok"
    # the masked run folder shows only the path down to the workspace; the tasks folder is empty
    lines = (world.root / "stream.jsonl").read_text().splitlines()
    assert lines == ["['attempts']", "False True"], lines
