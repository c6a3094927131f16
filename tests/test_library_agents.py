"""The paper's library agents (MetaGPT, Qwen-Agent, MS-Agent, DeepCode: bridge/agents/adapters/library.py)
run by `rgbridge run` like the CLI agents.

Fast: each framework's upstream prompt from the RepoGenesis-layout fixture (tests/fixtures/
repogenesis_prompt: one function per framework), the bridge's prompt without MCP tools, the
launch (the framework's own Python running the driver from the attempt's HOME, no key in any
file), the failure classes read from the driver's events, the driver run for real (a framework
that cannot be imported is `cli_missing`; files moved out of a framework's folder, never through
a symlink), `rgbridge agents install` building a real environment from a local wheel.

With the engine and the frameworks' environments (`paper_agent`: skipped unless
`rgbridge agents install NAME` built them; RGBRIDGE_REQUIRE_PAPER_AGENTS=qwen-agent,ms-agent
makes their absence a failure, as CI does): Qwen-Agent, MS-Agent and DeepCode write kv-ledger's
solution through their own tools for the scripted Chat Completions model and score 1.0 in both
profiles (DeepCode's files moved up out of `generate_code/`, the move in the recording); MetaGPT's
generate_repo, its roles answered in their own formats (`metagpt_policy`), writes it into its
project's source folder, moved up, and scores 1.0 too, and its time limit keeps what it wrote; a
401 endpoint is `agent_error`/auth for each; no workspace ever holds upstream's placeholder.

Fast, too: `rgbridge agents install` of a framework with stale pins through uv's overrides (local
wheels), and MetaGPT's driver against a stand-in `metagpt` (its source folder made, its key on
every configuration, its files moved up, also when SIGTERM ends it)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bridge.agents.adapters import library_driver
from bridge.agents.adapters.base import AgentError, AttemptSetup, HttpServer, ModelDoor
from bridge.agents.adapters.installs import install, installed, uv_index_args
from bridge.agents.adapters.library import Framework, adapter_of, parse
from bridge.agents.adapters.registry import ADAPTERS, FRAMEWORKS, adapter
from bridge.agents.run.runner import EXIT_AGENT_ERRORS
from bridge.cli import main as rgbridge
from bridge.scoring.images.base import uv_tool
from tests.helpers import SECRET, assert_atif, no_secret_on_disk, report_of
from tests.scripted_model import (
    Action,
    Conversation,
    Policy,
    Reply,
    ScriptedModel,
    Stall,
    library_policy,
    read_solution,
    refuse_key_policy,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "repogenesis_prompt"
PY_README = (FIXTURE / "repo_readme_verified_python_no_t" / "Blog" / "README.md").read_text()
PY_REQS = (FIXTURE / "repo_readme_verified_python_no_t" / "Blog" / "requirements.txt").read_text()
JAVA_POM = (FIXTURE / "repo_readme_verified_java_no_t_with_p" / "javalin-task-manager" / "pom.xml").read_text()
WHO = {"metagpt": "MetaGPT idea", "deepcode": "DeepCode plan", "qwen-agent": "Qwen-Agent system instruction"}
WHO["ms-agent"] = "MS-Agent implementation prompt"
LIBRARY = ("metagpt", "qwen-agent", "ms-agent", "deepcode")


def show(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = rgbridge(["run", "--show-prompt", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("agent", LIBRARY)
def test_upstream_prompt_is_each_frameworks_own(agent: str, tmp_path: Path, capsys) -> None:
    checkout = tmp_path / "RepoGenesis"
    shutil.copytree(FIXTURE, checkout)
    base = ["--agent", agent, "--prompt", "upstream", "--dataset", str(checkout), "--time-limit", "600"]
    code, text, err = show(capsys, *base, "--tasks", "Blog")
    assert code == 0, err
    lines = "\n".join(line.strip() for line in text.splitlines())
    # filled as the script fills it (README-only variant, its requirements), then stripped
    assert lines.startswith(f"Fixture {WHO[agent]}: build it.\n\nREADME:\n"), text
    assert PY_README.strip().splitlines()[0] in text and PY_REQS.strip() in text
    assert text.endswith("\n\nYou have 10 minutes of wall-clock time for this task.\n")
    for other, who in WHO.items():
        assert (who in text) == (other == agent)
    assert "Fixture user turn" not in text  # the f-string naming the folder is no template
    code, text, err = show(capsys, *base, "--tasks", "javalin-task-manager")
    assert code == 0 and f"Fixture {WHO[agent]}: build it." in text and JAVA_POM.strip() in text, err
    # a script without the framework's function: a clear refusal, not another framework's text
    script = checkout / "gen_and_eval.py"
    function = FRAMEWORKS[agent].upstream_function
    script.write_text(script.read_text().replace(f"def {function}(", "def renamed("))
    code, _, err = show(capsys, *base, "--tasks", "Blog")
    assert code == 2 and f"has no {function}()" in " ".join(err.split())
    assert not (checkout / "EXECUTED").exists(), "the generation script was executed"


def test_bridge_prompt_of_a_library_agent_names_no_mcp_tool(capsys) -> None:
    code, text, err = show(capsys, "--agent", "qwen-agent", "--tasks", "kv-ledger", "--time-limit", "900")
    assert code == 0, err
    assert "benchmark task 'kv-ledger'" in text and "You have 15 minutes" in text
    assert "port 8090" in text and "start.sh" in text
    assert "submit_task" not in text and "MCP" not in text  # it has no MCP client: the run submits
    assert (REPO_ROOT / "tasks" / "kv-ledger" / "README.md").read_text().strip() in text
    code, text, _ = show(capsys, "--agent", "codex", "--tasks", "kv-ledger")
    assert code == 0 and "submit_task" in text  # the CLI agents' prompt is unchanged


def test_launch_runs_the_driver_with_the_frameworks_python(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-agents")
    setup = AttemptSetup(
        binary="/envs/qwen/bin/python",
        prompt="Build it.",
        workspace=tmp_path / "ws",
        home=tmp_path / "home",
        tmp=tmp_path / "tmp",
        server=HttpServer("http://127.0.0.1:1/mcp", "token"),
        model="scripted-model",
        model_base_url="http://127.0.0.1:9/v1",
    )
    launch = adapter("qwen-agent").build(setup)
    driver = tmp_path / "home" / ".rgbridge-driver" / "library_driver.py"
    config_file = driver.with_name("config.json")
    assert launch.argv == ["/envs/qwen/bin/python", "-I", str(driver), str(config_file)]
    assert launch.files[driver] == Path(library_driver.__file__).read_text()
    config = json.loads(launch.files[config_file])
    assert config == {
        "framework": "qwen-agent",
        "dist": "qwen-agent",
        "workspace": str(tmp_path / "ws"),
        "home": str(tmp_path / "home"),
        "prompt": "Build it.",
        "model": "scripted-model",
        "base_url": "http://127.0.0.1:9/v1",
    }
    # the key stays on the host (the run's model gateway adds it): not in a file, not in the env
    assert SECRET not in "".join(launch.files.values()) and SECRET not in launch.env.values()
    assert "OPENAI_API_KEY" not in launch.env and "AWS_SECRET_ACCESS_KEY" not in launch.env
    assert launch.env["HOME"] == str(tmp_path / "home") and launch.cwd == tmp_path / "ws"
    assert launch.env["QWEN_AGENT_DEFAULT_WORKSPACE"].startswith(str(tmp_path / "home"))
    # through the gateway's door: its URL and the attempt's placeholder instead of the key
    door = ModelDoor("http://127.0.0.1:7", "rgbridge-attempt-placeholder")
    launch = adapter("qwen-agent").build(replace(setup, door=door))
    config = json.loads(launch.files[config_file])
    assert config["base_url"] == "http://127.0.0.1:7/v1" == launch.env["OPENAI_BASE_URL"]
    assert launch.env["OPENAI_API_KEY"] == "rgbridge-attempt-placeholder"
    assert SECRET not in "".join(launch.files.values()) and SECRET not in launch.env.values()


def _events(*items: dict[str, object]) -> list[dict[str, object]]:
    return [{"type": "start", "framework": "x", "version": "1", "model": "m"}, *items]


OK = {"type": "model_call", "path": "/v1/chat/completions", "status": 200}


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        (
            _events({"type": "error", "class": "cli_missing", "message": "ModuleNotFoundError: no ms_agent"}),
            "cli_missing",
        ),
        # a refused key is auth even when the framework swallowed it and ended "normally"
        (_events({"type": "model_call", "status": 401}, {"type": "end", "files": []}), "auth"),
        (_events(OK, {"type": "model_call", "status": 401}, {"type": "error", "class": "cli_crash"}), "auth"),
        (_events(OK, {"type": "model_call", "status": 429}, {"type": "end", "files": []}), "rate_limit"),
        (
            _events(OK, {"type": "model_call", "error": "ConnectError: refused"}, {"type": "end"}),
            "provider_unavailable",
        ),
        (_events(OK, {"type": "error", "class": "cli_crash", "message": "ValueError: bad JSON"}), "cli_crash"),
        (_events({"type": "end", "files": []}), "cli_crash"),  # never got an answer from the model
        (_events({"type": "model_call", "status": 500}, OK, {"type": "end", "files": ["a.py"]}), None),
        (_events(OK, {"type": "end", "files": []}), None),  # wrote nothing: scored as empty, its own result
    ],
)
def test_failure_classes_from_the_drivers_events(events: list[dict[str, object]], expected: str | None) -> None:
    run = parse(events, "prompt")
    failure = run.attempt_failure("exit", 3 if expected else 0, Path("/nonexistent"))
    assert (failure.cls if failure else None) == expected


def test_parse_keeps_calls_results_and_moves() -> None:
    run = parse(
        _events(
            {"type": "tool_call", "name": "code_interpreter", "arguments": '{"code": "print(1)"}'},
            {"type": "tool_result", "name": "code_interpreter", "text": "1"},
            {"type": "moved", "source": "/ws/generate_code", "files": ["app.py"], "count": 1},
            {"type": "message", "role": "assistant", "text": "done"},
            OK,
            {"type": "end", "files": ["app.py"]},
        ),
        "prompt",
    )
    assert run.failure is None and run.final_message == "done" and run.model == "m"
    names = [c.name for s in run.steps for c in s.calls]
    assert names == ["code_interpreter", "move_generated"]
    assert run.steps[1].results == [(run.steps[1].calls[0].call_id, "1")]
    assert "app.py" in run.steps[2].results[0][1]


def test_driver_run_for_real_reports_a_missing_framework(tmp_path: Path) -> None:
    """The bridge's own Python has no DeepCode: the driver says cli_missing on its stdout (JSON
    only) and exits non-zero; nothing is written into the workspace."""
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir()
    home.mkdir()
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "framework": "deepcode",
                "dist": "deepcode-hku",
                "workspace": str(ws),
                "home": str(home),
                "prompt": "p",
                "model": "m",
                "base_url": "http://127.0.0.1:9/v1",
            }
        )
    )
    done = subprocess.run(
        [sys.executable, "-I", library_driver.__file__, str(config)], capture_output=True, text=True, timeout=120
    )
    events = [json.loads(line) for line in done.stdout.splitlines()]  # every stdout line is an event
    assert done.returncode == library_driver.EXIT_FAILED
    assert [e["type"] for e in events] == ["start", "error"]
    assert events[1]["class"] == "cli_missing" and "workflows" in events[1]["message"]
    assert list(ws.iterdir()) == []
    failure = parse(events, "p").attempt_failure("exit", done.returncode, Path("/nonexistent"))
    assert failure is not None and failure.cls == "cli_missing"


FAKE_GENERATE_REPO = """
import json, os, sys, time
from pathlib import Path

def generate_repo(idea, project_name, project_path, **kwargs):
    # as 0.8.2's incremental mode: the project's source folder must be there already
    sources = Path(project_path) / project_name
    if not sources.is_dir():
        raise ValueError("Call with_srcs first.")
    (sources / "start.sh").write_text("python app.py\\n")
    (sources / "app.py").write_text("print('hi')\\n")
    from metagpt.config2 import Config, config
    from metagpt.context import Context
    keys = {config.llm.api_key, Context.model_fields["config"].default.llm.api_key, Config.default().llm.api_key}
    called = {"idea": idea, "project_name": project_name, "project_path": project_path, "keys": sorted(keys), **kwargs}
    Path(os.environ["HOME"], "args.json").write_text(json.dumps(called))
    if kwargs.get("n_round") == 5 and "hang" in idea:
        print("hanging", flush=True)
        time.sleep(600)
"""


def _fake_metagpt_env(tmp_path: Path) -> Path:
    """A venv whose `metagpt` is a stand-in with 0.8.2's entry point (the driver is the unit under
    test: what it prepares, calls, moves, and how it ends on SIGTERM)."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    (site,) = env.glob("lib/python3*/site-packages")
    (site / "metagpt").mkdir()
    (site / "metagpt" / "__init__.py").write_text("")
    (site / "metagpt" / "config2.py").write_text(
        "class LLM:\n    api_key = 'from-config2.yaml'\n"
        "class Config:\n    def __init__(self):\n        self.llm = LLM()\n"
        "    @classmethod\n    def default(cls):\n        return cls()\n"
        "config = Config.default()\n"
    )
    (site / "metagpt" / "context.py").write_text(  # pydantic's view of `config: Config = Config.default()`
        "from metagpt.config2 import Config\n"
        "class _Field:\n    default = Config.default()\n"
        "class Context:\n    model_fields = {'config': _Field()}\n"
    )
    (site / "metagpt" / "software_company.py").write_text(FAKE_GENERATE_REPO)
    return env / "bin" / "python"


def _metagpt_driver(tmp_path: Path, python: Path, prompt: str) -> tuple[subprocess.Popen[str], Path, Path]:
    ws, home = tmp_path / "ws" / "workspace", tmp_path / "home"
    ws.mkdir(parents=True)
    home.mkdir()
    config = tmp_path / "config.json"
    fields = {"framework": "metagpt", "dist": "metagpt", "workspace": str(ws), "home": str(home), "prompt": prompt}
    config.write_text(json.dumps({**fields, "model": "m", "base_url": "http://127.0.0.1:9/v1"}))
    proc = subprocess.Popen(
        [str(python), "-I", library_driver.__file__, str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "k"},
    )
    return proc, ws, home


def test_metagpt_driver_prepares_its_source_folder_and_moves_it_up(tmp_path: Path) -> None:
    proc, ws, home = _metagpt_driver(tmp_path, _fake_metagpt_env(tmp_path), "Build it.")
    out, err = proc.communicate(timeout=120)
    events = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 0, err
    assert [e["type"] for e in events] == ["start", "moved", "end"], events
    assert events[1]["files"] == ["app.py", "start.sh"] and events[1]["source"] == str(ws / "workspace")
    assert (ws / "start.sh").read_text() == "python app.py\n" and not (ws / "workspace").exists()
    args = json.loads((home / "args.json").read_text())  # upstream's arguments
    assert args == {
        "idea": "Build it.",
        "project_name": "workspace",
        "project_path": str(ws),
        "keys": ["k"],  # every configuration MetaGPT makes its model clients from holds the key
        "inc": False,
        "implement": True,
        "run_tests": False,
        "code_review": True,
        "n_round": 5,
        "investment": 3.0,
    }
    assert "set-in-memory-by-the-driver" in (home / ".metagpt" / "config2.yaml").read_text()  # not the key


def test_metagpt_ended_by_sigterm_keeps_what_it_wrote(tmp_path: Path) -> None:
    """The time limit's SIGTERM unwinds the framework: its source folder is still moved up (a
    SIGKILL would leave it where the scorer does not look), no error is reported, exit 143."""
    proc, ws, _home = _metagpt_driver(tmp_path, _fake_metagpt_env(tmp_path), "hang")
    assert proc.stderr is not None and proc.stdout is not None
    deadline = time.monotonic() + 60
    while "hanging" not in proc.stderr.readline() and time.monotonic() < deadline:
        pass
    proc.send_signal(signal.SIGTERM)
    out, _err = proc.communicate(timeout=60)
    events = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 128 + signal.SIGTERM
    assert [e["type"] for e in events] == ["start", "moved"], events
    assert (ws / "start.sh").is_file() and (ws / "app.py").is_file() and not (ws / "workspace").exists()


def test_files_are_moved_out_of_a_frameworks_folder_never_through_a_symlink(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "generate_code" / "app").mkdir(parents=True)
    (ws / "generate_code" / "start.sh").write_text("python app/main.py\n")
    (ws / "generate_code" / "app" / "main.py").write_text("print('hi')\n")
    (ws / "start.sh").write_text("old\n")
    secret = tmp_path / "outside.txt"
    secret.write_text("host file")
    (ws / "generate_code" / "leak.txt").symlink_to(secret)
    out = io.StringIO()
    library_driver.move_generated(ws / "generate_code", ws, library_driver.Events(out))
    assert (ws / "start.sh").read_text() == "python app/main.py\n"  # overwritten, as upstream does
    assert (ws / "app" / "main.py").read_text() == "print('hi')\n"
    assert not (ws / "leak.txt").exists() and not (ws / "generate_code").exists()
    (event,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert event["type"] == "moved" and event["files"] == ["app/main.py", "start.sh"] and event["count"] == 2


def _wheel(folder: Path, dist: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel (the format of PEP 427), so pip installs with no index."""
    name = dist.replace("-", "_")
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    depends = "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name}/__init__.py": "VALUE = 1\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n{depends}",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},,\n" for p in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for p, text in {**files, f"{info}/RECORD": record}.items():
            zf.writestr(p, text)
    return path


def test_agents_install_builds_a_complete_environment(tmp_path: Path, monkeypatch, capsys) -> None:
    """A real venv and pip install of a local wheel (PIP_NO_INDEX: nothing leaves the machine):
    the pinned version recorded with its time and size, kept when complete, redone when cut."""
    monkeypatch.setenv("RGBRIDGE_AGENTS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    (tmp_path / "wheels").mkdir()
    _wheel(tmp_path / "wheels", "rgb-fake-agent", "1.2.3")
    fake = Framework("fake", "rgb-fake-agent", "1.2.3", "fake_generate", "fake()", "nothing")
    record = install(fake)
    env = tmp_path / "home" / "fake" / "1.2.3"
    assert record.version == "1.2.3" and record.env == str(env) and record.bytes > 1_000_000 and record.seconds > 0
    assert installed(fake) == record
    probe = subprocess.run([str(env / "bin" / "python"), "-c", "import rgb_fake_agent"], check=False)
    assert probe.returncode == 0
    said: list[str] = []
    assert install(fake, say=said.append) == record and "already installed" in said[0]
    (env / "install.json").unlink()  # a cut install: no marker
    (env / "stale.txt").write_text("left by a cut install")
    again = install(fake)
    assert again.version == "1.2.3" and not (env / "stale.txt").exists()
    _wheel(tmp_path / "wheels", "rgb-other", "1.0")
    missing = Framework("missing", "rgb-not-there", "9.9", "f", "f()", "nothing")
    with pytest.raises(AgentError, match="pip install failed"):
        install(missing)
    assert installed(missing) is None


def test_uv_installs_a_framework_with_its_overrides_and_the_row_names_them(tmp_path: Path, monkeypatch) -> None:
    """MetaGPT's way (resolver uv): a release pinning a version the index no longer has and
    declaring one it does not have at all installs with the pin overridden and the other
    excluded, in one uv resolution of local wheels (UV_NO_INDEX); without the overrides it does
    not install. The version probe reads the overrides back from install.json (row and config hash)."""
    if uv_tool() is None:
        pytest.skip("no uv here (RGBRIDGE_INSTALLER=pip, or its wheel could not be fetched)")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "rgb-stale-pins", "0.8.2", requires=("rgb-gone==0.4.0", "rgb-missing==1.0", "rgb-kept>=1"))
    _wheel(wheels, "rgb-gone", "0.14.0")
    _wheel(wheels, "rgb-kept", "1.1")
    for name, value in {
        "RGBRIDGE_AGENTS_HOME": str(tmp_path / "home"),
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(wheels),
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
    }.items():
        monkeypatch.setenv(name, value)
    plain = Framework("stale", "rgb-stale-pins", "0.8.2", "f", "f()", "nothing", resolver="uv")
    with pytest.raises(AgentError, match="uv pip install failed"):
        install(plain)
    assert installed(plain) is None
    fixed = replace(plain, overrides=(("rgb-gone", "rgb-gone"), ("rgb-missing", "")))
    record = install(fixed, force=True)
    env = tmp_path / "home" / "stale" / "0.8.2"
    assert record.resolver == "uv" and record.overrides == "rgb-gone, no rgb-missing" and installed(fixed) == record
    assert (env / "rgbridge-overrides.txt").read_text() == "rgb-gone\n"
    assert (env / "rgbridge-excludes.txt").read_text() == "rgb-missing\n"
    listed = subprocess.run(
        [str(env / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('rgb-gone'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.strip() == "0.14.0"
    probe = adapter_of(fixed)
    done = subprocess.run([str(env / "bin" / "python"), *probe.version_args], capture_output=True, text=True)
    assert done.stdout.strip() == "rgb-stale-pins 0.8.2 (overrides: rgb-gone, no rgb-missing)", done.stderr


def test_the_version_line_names_the_overrides_in_80_characters(tmp_path: Path) -> None:
    """The version probe (the row's agent version, in the configuration hash) names an install's
    overrides; a list too long for the 80 characters a version line keeps becomes its digest."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True, timeout=120)
    (site,) = (tmp_path / "env").glob("lib/python3*/site-packages")
    (site / "ms_agent-1.6.0.dist-info").mkdir()
    (site / "ms_agent-1.6.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ms-agent\nVersion: 1.6.0\n"
    )
    python = tmp_path / "env" / "bin" / "python"

    def line() -> str:
        done = subprocess.run([str(python), *adapter("ms-agent").version_args], capture_output=True, text=True)
        return done.stdout.strip()

    assert line() == "ms-agent 1.6.0"  # no install.json: a user's own environment
    marker = tmp_path / "env" / "install.json"
    marker.write_text(json.dumps({"overrides": "lancedb"}))
    assert line() == "ms-agent 1.6.0 (overrides: lancedb)"
    long = "no sentence-transformers, no faiss-cpu, no moviepy, no edge_tts"
    marker.write_text(json.dumps({"overrides": long}))
    digest = hashlib.sha256(long.encode()).hexdigest()[:12]
    assert line() == f"ms-agent 1.6.0 (overrides sha256 {digest})" and len(line()) <= 80
    marker.write_text("{not json")
    assert line() == "ms-agent 1.6.0"


def test_uv_takes_the_hosts_pip_index_settings() -> None:
    assert uv_index_args({}) == []
    settings = {"PIP_INDEX_URL": "http://127.0.0.1:1/simple", "PIP_EXTRA_INDEX_URL": "http://a/s http://b/s"}
    settings["PIP_TRUSTED_HOST"] = "a"
    assert uv_index_args(settings) == [
        "--index-url",
        "http://127.0.0.1:1/simple",
        "--extra-index-url",
        "http://a/s",
        "--extra-index-url",
        "http://b/s",
        "--allow-insecure-host",
        "a",
    ]


def test_an_uninstalled_framework_refuses_the_run_with_the_fix(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("RGBRIDGE_AGENTS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with pytest.raises(AgentError, match="rgbridge agents install metagpt"):
        ADAPTERS["metagpt"].find_binary()
    code = rgbridge(
        [
            "run",
            "--agent",
            "ms-agent",
            "--tasks",
            "kv-ledger",
            "--agent-home",
            str(tmp_path),
            "--output-dir",
            str(tmp_path / "o"),
        ]
    )
    assert code == 2 and "not a virtual environment" in capsys.readouterr().err
    assert rgbridge(["agents", "list"]) == 0
    listed = capsys.readouterr().out
    for name, framework in FRAMEWORKS.items():
        assert f"pinned {framework.requirement}" in listed and name in listed


# ----------------------------------------------------------------------------- the real frameworks


@pytest.fixture()
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)


def _run(agent: str, model: ScriptedModel, out: Path, *extra: str) -> int:
    return rgbridge(
        [
            "run",
            "--agent",
            agent,
            "--tasks",
            "kv-ledger",
            "--time-limit",
            "600",
            "--model",
            "scripted-model",
            "--model-base-url",
            model.openai_base_url,
            "--output-dir",
            str(out),
            "--run-id",
            f"{agent}-run",
            *extra,
        ]
    )


def _last_text(conv: Conversation) -> str:
    content = conv.messages[-1].get("content") if conv.messages else ""
    return content if isinstance(content, str) else json.dumps(content)


#: MetaGPT's asks: its action nodes' JSON between [CONTENT] tags after a "format example", the
#: Engineer's code (one file per ask, in a fenced block) and its review (LGTM or LBTM)
MG_FORMAT = re.compile(r"## format example\s*\[CONTENT\]\s*(.*?)\s*\[/CONTENT\]", re.S)
MG_CODE = re.compile(r"## Code: (\S+?)\. Write code|Only write one file (\S+?), write")  # plain, incremental
MG_REVIEW = re.compile(r"## Code Review: (\S+)")


def metagpt_policy(files: dict[str, str], *, stall_on_review_of: str | None = None) -> Policy:
    """A model that answers MetaGPT 0.8.2's roles in the formats their actions parse, so that its
    own flow writes `files`: the Product Manager's PRD, the Architect's design and the Project
    Manager's tasks are their format examples' JSON with the file list, task list and packages
    filled in (no quadrant chart: it would be drawn); the Engineer's plan likewise; each
    `## Code: NAME` ask gets that file in a fenced block, each review LGTM (`stall_on_review_of`:
    that file's review hangs instead). Anything else gets a plain answer."""
    names = sorted(files, key=lambda n: (n != "start.sh", n))
    packages = [line.strip() for line in files.get("requirements.txt", "").splitlines() if line.strip()]
    fills: dict[str, object] = {
        "Competitive Quadrant Chart": "",
        "File list": names,
        "Task list": names,
        "Logic Analysis": [[n, f"{n} as the README describes"] for n in names],
        "Required Python packages": packages,
    }

    def policy(conv: Conversation) -> Action:
        text = _last_text(conv)
        example = MG_FORMAT.search(text)
        if example:
            data = json.loads(example.group(1))
            data.update({key: value for key, value in fills.items() if key in data})
            return Reply("[CONTENT]\n" + json.dumps(data, indent=2) + "\n[/CONTENT]")
        review = MG_REVIEW.search(text)
        if "## Code Review Result" in text and review:
            if review.group(1) == stall_on_review_of:
                return Stall()
            return Reply(f"## Code Review: {review.group(1)}\n1. Yes.\n\n## Code Review Result\nLGTM")
        code = MG_CODE.search(text)
        name = (code.group(1) or code.group(2)) if code else None
        if name is not None and name in files:
            return Reply(f"## Code: {name}\n```python\n{files[name]}```\n")
        return Reply("Implemented as specified in the README.")

    return policy


def _no_placeholder(out: Path) -> None:
    assert not list(out.glob("attempts/**/AGENT.txt")), "upstream's placeholder must never be written"


@pytest.mark.docker
@pytest.mark.parametrize("agent", ["qwen-agent", "ms-agent", "deepcode"])
def test_framework_writes_kv_ledger_with_its_own_tool_and_scores_1(
    agent: str, docker_client, paper_agent: Callable[[str], Path], tmp_path: Path, keys: None, capsys
) -> None:
    paper_agent(agent)
    out = tmp_path / "out"
    solution = read_solution(REPO_ROOT / "tasks" / "kv-ledger")
    with ScriptedModel(library_policy({"kv-ledger": solution})) as model:
        code = _run(agent, model, out)
        assert not model.errors, model.errors
        requests = model.agent_requests()
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    (row,) = report_of(out)["results"]
    framework = FRAMEWORKS[agent]
    probe = subprocess.run(
        [str(paper_agent(agent)), *adapter(agent).version_args], capture_output=True, text=True, check=True
    )
    assert row["agent"]["name"] == agent and row["agent"]["version"] == probe.stdout.strip()
    assert probe.stdout.startswith(f"{framework.dist} {framework.pin}")
    assert ("(overrides" in probe.stdout) == bool(framework.overrides)  # MS-Agent's dropped dependencies
    for profile in ("compat", "strict"):
        p1 = row["rgbridge"]["profiles"][profile]["pass_at_1"]
        assert p1["total"] > 0 and p1["passed"] == p1["total"], (profile, p1)
    assert row["run"]["sandbox"]["kind"] == "bwrap" and row["run"]["sandbox"]["confined"] is True
    assert row["run"]["submitted_by"] == "agent_exit" and row["run"]["tool_calls"] >= 1
    assert all(r.api == "chat" for r in requests) and len(requests) >= 2
    trajectory = assert_atif(Path(row["run"]["trajectory"]))
    names = [c.function_name for s in trajectory.steps for c in s.tool_calls or []]
    assert any(n == "code_interpreter" or n.endswith("write_file") for n in names) or agent == "deepcode", names
    if agent == "deepcode":  # written into generate_code/ through its MCP tool, moved up: in the recording
        assert "move_generated" in names
        stream = (Path(row["run"]["recording"]) / "agent" / "stream.jsonl").read_text()
        moved = [json.loads(line) for line in stream.splitlines() if '"moved"' in line]
        assert moved and "start.sh" in moved[0]["files"], stream[-2000:]
    _no_placeholder(out)
    no_secret_on_disk(out)


@pytest.mark.docker
@pytest.mark.parametrize("agent", LIBRARY)
def test_a_refused_key_is_agent_error_auth(
    agent: str, docker_client, paper_agent: Callable[[str], Path], tmp_path: Path, keys: None
) -> None:
    paper_agent(agent)
    out = tmp_path / "out"
    with ScriptedModel(refuse_key_policy) as model:
        code = _run(agent, model, out, "--retries", "0", "--allow-errors")
        assert model.agent_requests(), "the framework never reached the endpoint"
    # a refused key stops the run, whatever --allow-errors says (the gateway's auth stop)
    assert code == EXIT_AGENT_ERRORS
    report = report_of(out)
    (row,) = report["results"]
    assert row["outcome"] == "agent_error" and row["agent_error"]["class"] == "auth", row.get("agent_error")
    assert report["metadata"]["stopped_by_auth"]["attempt"] == "kv-ledger.a1"
    assert "rgbridge" not in row and report["metadata"]["errored_attempts"] == ["kv-ledger.a1"]  # nothing scored
    _no_placeholder(out)
    no_secret_on_disk(out)


def _stream(row: dict[str, Any]) -> list[dict[str, Any]]:
    stream = Path(row["run"]["recording"]) / "agent" / "stream.jsonl"
    return [json.loads(line) for line in stream.read_text().splitlines() if line.strip()]


@pytest.mark.docker
def test_metagpt_runs_its_own_flow_and_its_project_scores_1(
    docker_client, paper_agent: Callable[[str], Path], tmp_path: Path, keys: None
) -> None:
    """MetaGPT's generate_repo, as upstream calls it, through the gateway: its Product Manager,
    Architect, Project Manager and Engineer (code and review of each file) answered in their
    formats write kv-ledger into its project's source folder; the files are moved up into the
    workspace (recorded) and the row scores 1.0 in both profiles; the version names the override."""
    paper_agent("metagpt")
    out = tmp_path / "out"
    with ScriptedModel(metagpt_policy(read_solution(REPO_ROOT / "tasks" / "kv-ledger"))) as model:
        code = _run("metagpt", model, out)
        asks = [_last_text(r.conversation) for r in model.agent_requests() if r.conversation is not None]
    assert code == 0
    (row,) = report_of(out)["results"]
    assert row["agent"]["version"] == "metagpt 0.8.2 (overrides: lancedb)"
    for profile in ("compat", "strict"):
        p1 = row["rgbridge"]["profiles"][profile]["pass_at_1"]
        assert p1["total"] > 0 and p1["passed"] == p1["total"], (profile, p1)
    assert row["run"]["submitted_by"] == "agent_exit" and row["run"]["sandbox"]["confined"] is True
    # its own flow: PRD, design, tasks and plan (format examples), then code and review per file
    assert sum(bool(MG_FORMAT.search(a)) for a in asks) == 4, [a[:80] for a in asks]
    assert sum("## Code Review Result" in a for a in asks) == 3
    (moved,) = [e for e in _stream(row) if e.get("type") == "moved"]
    assert sorted(moved["files"]) == ["app.py", "requirements.txt", "start.sh"] and moved["source"].endswith(
        "/workspace/workspace"
    )
    trajectory = assert_atif(Path(row["run"]["trajectory"]))
    assert "move_generated" in [c.function_name for s in trajectory.steps for c in s.tool_calls or []]
    _no_placeholder(out)
    no_secret_on_disk(out)


@pytest.mark.docker
def test_the_time_limit_ends_metagpt_and_keeps_what_it_wrote(
    docker_client, paper_agent: Callable[[str], Path], tmp_path: Path, keys: None
) -> None:
    """MetaGPT's model hangs on the review of its last file: the time limit ends it (SIGTERM
    unwinds it), what its Engineer had saved is moved up and scored, no process of it is left."""
    paper_agent("metagpt")
    out = tmp_path / "out"
    policy = metagpt_policy(read_solution(REPO_ROOT / "tasks" / "kv-ledger"), stall_on_review_of="requirements.txt")
    with ScriptedModel(policy) as model:
        code = _run("metagpt", model, out, "--time-limit", "90")
    assert code == 0
    (row,) = report_of(out)["results"]
    assert row["run"]["ended"] == "time_limit" and row["run"]["submitted_by"] == "time_limit"
    assert row["rgbridge"]["profiles"]["strict"]["pass_at_1"] is not None  # scored on what it wrote
    (moved,) = [e for e in _stream(row) if e.get("type") == "moved"]
    assert moved["files"] == ["app.py", "start.sh"], moved  # requirements.txt was never saved
    workspace = out / "attempts" / "kv-ledger" / "a1" / "workspace"
    assert (workspace / "start.sh").is_file() and not (workspace / "workspace").exists()
    left = subprocess.run(["pgrep", "-f", str(out / "attempts")], capture_output=True, text=True, check=False).stdout
    assert left == "", f"processes of the attempt outlived it: {left}"
    _no_placeholder(out)


@pytest.mark.docker
def test_a_framework_that_cannot_be_imported_is_cli_missing(docker_client, tmp_path: Path, keys: None) -> None:
    """An environment whose framework is recorded as installed but cannot be imported (here: its
    metadata only) runs to an agent_error/cli_missing row: nothing is written for it, nothing is
    scored (upstream wrote an AGENT.txt placeholder and scored that)."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    (site,) = env.glob("lib/python3*/site-packages")
    info = site / "metagpt-0.8.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: metagpt\nVersion: 0.8.2\n")
    out = tmp_path / "out"
    with ScriptedModel(library_policy({})) as model:
        code = _run("metagpt", model, out, "--agent-home", str(env), "--retries", "0", "--allow-errors")
        assert not model.agent_requests()  # it never started
    assert code == 0
    report = report_of(out)
    (row,) = report["results"]
    assert row["agent"]["version"] == "metagpt 0.8.2"
    assert row["outcome"] == "agent_error" and row["agent_error"]["class"] == "cli_missing", row.get("agent_error")
    assert "metagpt" in row["agent_error"]["message"] and "rgbridge" not in row
    assert list((out / "attempts" / "kv-ledger" / "a1" / "workspace").rglob("*.py")) == []
    _no_placeholder(out)


@pytest.mark.docker
def test_the_time_limit_ends_the_framework_and_its_kernel(
    docker_client, paper_agent: Callable[[str], Path], tmp_path: Path, keys: None
) -> None:
    """Qwen-Agent writes the files through its code interpreter (a Jupyter kernel, a process of its
    own), then its model hangs: the time limit ends the attempt, no process of it is left (the
    kernel included), and what it wrote is scored."""
    paper_agent("qwen-agent")
    out = tmp_path / "out"
    solve = library_policy({"kv-ledger": read_solution(REPO_ROOT / "tasks" / "kv-ledger")})

    def then_hang(conv: Conversation) -> Action:
        answered = any("<tool_response>" in str(m.get("content")) for m in conv.messages)
        return Stall() if answered else solve(conv)

    with ScriptedModel(then_hang) as model:
        code = rgbridge(
            [
                "run",
                "--agent",
                "qwen-agent",
                "--tasks",
                "kv-ledger",
                "--time-limit",
                "45",
                "--model",
                "scripted-model",
                "--model-base-url",
                model.openai_base_url,
                "--output-dir",
                str(out),
                "--run-id",
                "hang",
            ]
        )
    assert code == 0
    (row,) = report_of(out)["results"]
    assert row["run"]["ended"] == "time_limit" and row["run"]["submitted_by"] == "time_limit"
    assert row["rgbridge"]["profiles"]["strict"]["pass_at_1"]["score"] == 1.0
    home = out / "attempts" / "kv-ledger" / "a1" / "home"
    assert list(home.glob("qwen-agent/**/launch_kernel_*.py")), "the kernel was started"
    left = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True, check=False).stdout
    assert left == "", f"processes of the attempt outlived it: {left}"
