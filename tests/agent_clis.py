"""Running the real agent CLIs (Claude Code, Codex CLI) in tests: finding the binaries, an
isolated home per run, the environment and config that keep them on loopback, and the checks
made after a run (the sealed score in the recording, no golden file left where an agent can
read it).

How the CLIs are driven follows their public documentation: Claude Code's headless mode
(https://docs.anthropic.com/en/docs/claude-code/cli-reference, `-p` with `--output-format
stream-json`) and settings (https://docs.anthropic.com/en/docs/claude-code/settings: telemetry,
auto-update and non-essential traffic off); the Codex CLI's `codex exec`
(https://github.com/openai/codex/blob/main/docs/exec.md) and `config.toml`
(https://github.com/openai/codex/blob/main/docs/config.md: `model_providers`,
`mcp_servers`, `approval_policy`). The binaries come from PyPI (README "Run the tests"):
Claude Code is bundled in the `claude-agent-sdk` wheel, the Codex CLI is `openai-codex-cli-bin`.

A test that needs a CLI asks `agent_cli("claude")`: a missing binary skips the test, or fails
it when `RGBRIDGE_REQUIRE_AGENT_CLIS=1` (set by CI, like `RGBRIDGE_REQUIRE_DOCKER`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
MCP_SERVER_NAME = "rgbridge"  # mcp_server.ide_config.SERVER_KEY

# Variables of the test's own environment that must not reach an agent CLI or the bridge it
# starts: model credentials and endpoints, a session or token of another bridge, the user's homes.
_DROPPED_PREFIXES = ("ANTHROPIC_", "CLAUDE", "OPENAI_", "CODEX_", "XDG_")
_DROPPED = {
    "HOME",
    "TMPDIR",
    "TMP",
    "TEMP",
    "RGBRIDGE_WORKSPACE",
    "RGBRIDGE_TOKEN",
    "RGBRIDGE_RECORDINGS",
    "RUST_LOG",
    "NODE_OPTIONS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
}

#: Claude Code: no telemetry, no auto-update, no error reports, no other non-essential traffic
#: (Claude Code settings documentation, "Environment variables").
CLAUDE_QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


# --------------------------------------------------------------------------------------------
# Binaries


def _require_clis() -> bool:
    return os.environ.get("RGBRIDGE_REQUIRE_AGENT_CLIS", "") not in ("", "0", "false", "no")


def find_claude() -> Path | None:
    """Claude Code: `$RGBRIDGE_CLAUDE_BIN`, else the binary bundled in the `claude-agent-sdk`
    wheel, else `claude` on PATH."""
    override = os.environ.get("RGBRIDGE_CLAUDE_BIN")
    if override:
        return Path(override)
    try:
        import claude_agent_sdk  # type: ignore[import-not-found]

        bundled = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
        if bundled.is_file():
            return bundled
    except ImportError:
        pass
    found = shutil.which("claude")
    return Path(found) if found else None


def find_codex() -> Path | None:
    """The Codex CLI: `$RGBRIDGE_CODEX_BIN`, else the `openai-codex-cli-bin` wheel's binary,
    else `codex` on PATH."""
    override = os.environ.get("RGBRIDGE_CODEX_BIN")
    if override:
        return Path(override)
    try:
        from codex_cli_bin import bundled_codex_path  # type: ignore[import-not-found]

        return Path(bundled_codex_path())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("codex")
    return Path(found) if found else None


FINDERS = {"claude": find_claude, "codex": find_codex}


def agent_cli(name: str) -> Path:
    """The CLI's binary, or skip (fail under RGBRIDGE_REQUIRE_AGENT_CLIS=1) when it is missing."""
    path = FINDERS[name]()
    if path is None or not os.access(path, os.X_OK):
        message = f"agent CLI {name!r} not installed (pip install -e '.[agents]')"
        if _require_clis():
            pytest.fail(f"{message}; required by RGBRIDGE_REQUIRE_AGENT_CLIS=1")
        pytest.skip(message)
    return path


def cli_version(binary: Path, env: dict[str, str]) -> str:
    """`--version` as the CLI prints it, run in the run's isolated environment."""
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, env=env)
    return out.stdout.strip()


# --------------------------------------------------------------------------------------------
# One isolated run


@dataclass
class AgentDirs:
    """Everything of one agent run under `root`: the workspace the agent works in, the bridge's
    recordings, and the CLI's own HOME, TMPDIR and (Codex) CODEX_HOME."""

    root: Path
    ws: Path = field(init=False)
    rec: Path = field(init=False)
    home: Path = field(init=False)
    tmp: Path = field(init=False)
    codex_home: Path = field(init=False)

    def __post_init__(self) -> None:
        self.ws, self.rec = self.root / "ws", self.root / "rec"
        self.home, self.tmp, self.codex_home = self.root / "home", self.root / "tmp", self.root / "codex-home"
        for d in (self.ws, self.home, self.tmp, self.codex_home):
            d.mkdir(parents=True, exist_ok=True)

    def cli_places(self) -> list[Path]:
        """Where the agent's user keeps things of its own during the run."""
        return [self.home, self.tmp, self.codex_home]


def bridge_env() -> dict[str, str]:
    """What the bridge started by a CLI must see from the test's environment: the interpreter's
    import path (PYTHONPATH, for a checkout that is not the installed one) and the user's
    caches (`RGBRIDGE_CACHE`: image root filesystems, package caches; without it the bridge would
    look in the agent's fresh HOME)."""
    from bridge.locations import cache_dir

    env = {"RGBRIDGE_CACHE": str(cache_dir())}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    if os.environ.get("DOCKER_HOST"):
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    return env


def base_env(dirs: AgentDirs) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED and not k.startswith(_DROPPED_PREFIXES)}
    env.update(HOME=str(dirs.home), TMPDIR=str(dirs.tmp), **bridge_env())
    return env


def claude_env(dirs: AgentDirs, base_url: str) -> dict[str, str]:
    """Claude Code's environment: its model calls go to `base_url`, nothing else leaves."""
    env = base_env(dirs)
    env.update(CLAUDE_QUIET_ENV)
    env.update(ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY="sk-ant-scripted-test-key")
    return env


def claude_command(binary: Path, prompt: str, mcp_config: Path, *, debug_file: Path | None = None) -> list[str]:
    cmd = [
        str(binary), "-p", prompt,
        "--output-format", "stream-json", "--verbose",
        "--mcp-config", str(mcp_config), "--strict-mcp-config",
        "--allowedTools", f"mcp__{MCP_SERVER_NAME}", "Write", "Read",
        "--permission-mode", "acceptEdits",
        "--no-session-persistence",
    ]  # fmt: skip
    if debug_file is not None:
        cmd += ["--debug-file", str(debug_file)]
    return cmd


CODEX_KEY_ENV = "OPENAI_API_KEY"  # the provider key variable of bridge/agents/adapters/codex.py


def codex_config(base_url: str, server: dict[str, Any], *, model: str = "scripted-model") -> str:
    """CODEX_HOME/config.toml from the project's own Codex writer (bridge/agents/adapters/codex.py, the
    one `rgbridge run` uses): the scripted model as a Responses-API provider, the bridge as a
    stdio MCP server (`server`: `command`/`args`/`env`), no approvals asked, and everything that
    would leave the machine off."""
    from bridge.agents.adapters import codex
    from bridge.agents.adapters.base import AttemptSetup, McpServer
    from bridge.agents.adapters.mcp_configs import render_text

    setup = AttemptSetup(
        binary="codex",
        prompt="",
        workspace=Path("."),
        home=Path("."),
        tmp=Path("."),
        server=McpServer(server["command"], list(server["args"]), dict(server.get("env") or {})),
        model=model,
        model_base_url=base_url,
    )
    return render_text("codex", codex.config(setup))


def codex_env(dirs: AgentDirs) -> dict[str, str]:
    env = base_env(dirs)
    env.update(CODEX_HOME=str(dirs.codex_home), **{CODEX_KEY_ENV: "sk-scripted-test-key"})
    return env


def codex_command(binary: Path, prompt: str, workspace: Path, *, last_message: Path | None = None) -> list[str]:
    cmd = [str(binary), "exec", "--json", "--skip-git-repo-check", "--ephemeral", "-C", str(workspace)]
    if last_message is not None:
        cmd += ["-o", str(last_message)]
    return [*cmd, prompt]


def ide_config(ide: str, workspace: Path, *extra: str) -> dict[str, Any]:
    """The config document `rgbridge ide-config IDE` prints (the project's own writer)."""
    out = subprocess.run(
        [*rgbridge_command(), "ide-config", ide, "--workspace", str(workspace), *extra],
        capture_output=True, text=True, timeout=120, check=True, cwd=REPO_ROOT,
    )  # fmt: skip
    return json.loads(out.stdout)


def rgbridge_command() -> list[str]:
    script = Path(sys.executable).with_name("rgbridge")
    return [str(script)] if script.exists() else [sys.executable, "-m", "bridge.cli"]


# --------------------------------------------------------------------------------------------
# After the run


@dataclass
class Sealed:
    rec_dir: Path
    record: dict[str, Any]
    summary: dict[str, Any]
    waited: float  # seconds from the start of the wait to the sealed score


def session_dirs(rec: Path) -> list[Path]:
    return sorted(p.parent for p in rec.glob("*/session.json"))


def wait_for_sealed_score(rec: Path, *, deadline: float, since: float | None = None) -> Sealed:
    """Poll the recordings folder (nothing else: no tool call, no command) until the one session
    in it is scored and sealed; fail at `deadline` seconds with what the recording says."""
    from bridge.recording.verify import verify_recording
    from bridge.sessions.models import SessionRecord, result_status

    start = since if since is not None else time.monotonic()
    end = time.monotonic() + deadline
    last = "no session recorded"
    while time.monotonic() < end:
        dirs = session_dirs(rec)
        if len(dirs) == 1:
            rec_dir = dirs[0]
            try:
                record = SessionRecord.model_validate_json((rec_dir / "session.json").read_text())
            except (OSError, ValueError) as exc:
                last = f"session.json unreadable: {exc}"
            else:
                job = record.job
                last = f"state={record.state} job={job.state if job else None} ({job.message if job else ''})"
                if (
                    record.state == "scored"
                    and job is not None
                    and job.state == "done"
                    and (rec_dir / "integrity.json").is_file()
                ):
                    waited = time.monotonic() - start
                    report = verify_recording(rec_dir)
                    assert report.ok, report.problems
                    status = result_status(record, rec_dir)
                    return Sealed(rec_dir, record.model_dump(mode="json"), status.summary or {}, waited)
                if job is not None and job.state == "failed":
                    pytest.fail(f"scoring failed: {job.error}")
        elif len(dirs) > 1:
            last = f"{len(dirs)} sessions recorded"
        time.sleep(0.5)
    tail = ""
    for rec_dir in session_dirs(rec):
        lines = (rec_dir / "events.jsonl").read_text().splitlines()
        tail = " | ".join(json.loads(x)["type"] for x in lines[-6:])
    pytest.fail(f"no sealed score within {deadline:.0f}s after the CLI exited: {last}; last events: {tail}")


def assert_pass_at_1(summary: dict[str, Any]) -> None:
    for profile in ("strict", "compat"):
        row = summary[profile]
        assert row["pass_at_1"] == 1.0 and row["dsr"] is True and row["passed"] == row["total"] > 0, (profile, row)


def score_deadline() -> float:
    """Seconds a test waits for the sealed score after the CLI exits (RGBRIDGE_SCORE_DEADLINE)."""
    return float(os.environ.get("RGBRIDGE_SCORE_DEADLINE", "420"))


# --------------------------------------------------------------------------------------------
# Golden copies


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            h.update(block)
    return h.hexdigest()


def golden_digests(task_dir: Path, parts: Iterable[str] = ("tests", "solution")) -> dict[str, str]:
    """sha256 -> path of every non-empty golden file of the task (its tests and its solution)."""
    out: dict[str, str] = {}
    for part in parts:
        for path in sorted((task_dir / part).rglob("*")):
            if path.is_file() and not path.is_symlink() and path.stat().st_size > 0 and "__pycache__" not in path.parts:
                out[_digest(path)] = str(path.relative_to(task_dir))
    return out


def golden_copies(roots: Iterable[Path], digests: dict[str, str], *, skip: Iterable[Path] = ()) -> list[str]:
    """Files under `roots` whose content equals a golden file, as `path (= golden)`."""
    skipped = [Path(p) for p in skip]
    found: list[str] = []
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: None):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if not any((here / d) == s for s in skipped)]
            for name in filenames:
                path = here / name
                try:
                    if path.is_symlink() or not path.is_file():
                        continue
                    digest = _digest(path)
                except OSError:
                    continue
                if digest in digests:
                    found.append(f"{path} (= {digests[digest]})")
    return found


def temp_entries() -> set[str]:
    """The entries of the system temp folder now (to tell which ones a test added)."""
    base = Path(tempfile.gettempdir())
    try:
        return {p.name for p in base.iterdir()}
    except OSError:
        return set()


def assert_no_golden_copies(
    task_dir: Path, dirs: AgentDirs, temp_before: set[str], *, also: Iterable[Path] = ()
) -> None:
    """No file equal to a golden file of the task (tests and solution) in the CLI's HOME, TMPDIR
    and CODEX_HOME, in the folders of `also` (the temp folder of a bridge the test started), or in what the run added to the system temp folder; in the workspace, where
    the agent wrote the solution's files itself, no copy of a golden test.

    Outside the workspace the golden files of every shipped task count (the shared check of
    tests/golden_leaks.py); in the workspace only the task's golden tests."""
    from tests.golden_leaks import find_golden_copies

    def copies(roots: Iterable[Path]) -> list[str]:
        return [f"{copy} (= {original})" for copy, original in find_golden_copies(roots)]

    tests_only = golden_digests(task_dir, ("tests",))
    leaks = copies([*dirs.cli_places(), *also])
    leaks += golden_copies([dirs.ws], tests_only)
    assert not leaks, "golden files copied where the agent's user can read them:\n" + "\n".join(leaks)
    if os.environ.get("RGBRIDGE_GOLDEN_CHECK_SYSTEM_TMP", "1") in ("0", "false", "no"):
        return
    base = Path(tempfile.gettempdir())
    added = [base / name for name in temp_entries() - temp_before]
    # pytest's own temporary folders hold this test's run folder (checked piece by piece above).
    added = [p for p in added if not p.name.startswith("pytest-of-")]
    leaks = copies(added)
    assert not leaks, (
        "golden files copied into the system temp folder during the run (every process of this run had "
        "its own TMPDIR; on a machine shared with other test runs they may be another run's: set "
        "RGBRIDGE_GOLDEN_CHECK_SYSTEM_TMP=0 there):\n" + "\n".join(leaks)
    )
