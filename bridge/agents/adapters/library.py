"""Library agents: the agent frameworks the RepoGenesis paper ran through their Python APIs
(its generation script `gen_and_eval.py`): MetaGPT, Qwen-Agent, MS-Agent and DeepCode. Each is an
adapter like the CLI ones (bridge/agents/adapters/metagpt.py, qwen_agent.py, ms_agent.py, deepcode.py
declare a `Framework`; this module makes the adapter of it).

- Its "binary" is the Python of the framework's own virtual environment: `--agent-home DIR`, else
  the one `rgbridge agents install NAME` built (bridge/agents/adapters/installs.py) from the version pinned
  here. The sandbox binds that environment read-only (bridge/agents/confine/needs.py follows a
  venv's python to the environment and its base interpreter).
- The launch is the framework's Python running the driver (bridge/agents/adapters/library_driver.py,
  written into the attempt's HOME with its configuration) with the prompt and the endpoint of
  the AttemptSetup; the key is OPENAI_API_KEY of the launch's environment.
- The driver's events are read back here (`parse`): a framework that could not be imported is
  `cli_missing`, one that raised `cli_crash`, a provider failure seen on the wire its class
  (401/403 auth from any call; otherwise the last call's failure), a framework that never
  reached the model a crash. Anything else is the agent's work, scored as the workspace stands.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

from bridge.agents.adapters.base import Adapter, AgentError, AttemptSetup, Launch, base_env
from bridge.agents.adapters.events import Call, ParsedRun, Step, arguments, as_dict, as_int, as_list, clip
from bridge.agents.adapters.failures import Failure, FailureClass, classify_text, from_status
from bridge.agents.adapters.failures import clip as clip_message
from bridge.locations import agents_home

KEY_ENV = "OPENAI_API_KEY"
DRIVER = Path(__file__).with_name("library_driver.py")
DRIVER_DIR = ".rgbridge-driver"
#: prints `<distribution> <version>` without importing the framework (a broken one still has a
#: version: its attempts end cli_missing, each with the import error), and the overrides the
#: environment was installed with when `rgbridge agents install` built it (its `install.json`),
#: so that rows and the configuration hash tell two resolutions of one pin apart: `metagpt 0.8.2
#: (overrides: lancedb)`, or, where the list would not fit the 80 characters a version line keeps
#: (bridge/agents/adapters/base.py), the first 12 hex digits of its sha256
VERSION_CODE = (
    "import sys, os, json, hashlib, importlib.metadata as m\n"
    "o = ''\n"
    "try:\n"
    "    o = str(json.load(open(os.path.join(sys.prefix, 'install.json'))).get('overrides') or '')\n"
    "except Exception:\n"
    "    pass\n"
    "line = sys.argv[1] + ' ' + m.version(sys.argv[1])\n"
    "if o:\n"
    "    named = line + ' (overrides: ' + o + ')'\n"
    "    line = named if len(named) <= 80 else line + ' (overrides sha256 ' + hashlib.sha256(o.encode()).hexdigest()[:12] + ')'\n"
    "print(line)"
)


@dataclass(frozen=True)
class Framework:
    """One framework: its adapter name, PyPI distribution and pinned version, and what the README's
    agent table says of it."""

    name: str
    dist: str
    pin: str
    #: the generation script's function whose f-string is this framework's upstream prompt
    upstream_function: str
    #: README: the entry point upstream calls
    entry: str
    #: README: what the bridge does differently, and why
    differs: str
    extras: tuple[str, ...] = ()
    #: declared dependencies replaced (name -> requirement; "" drops it), the framework's module
    #: says why: with pip the distribution is installed without its dependencies, then its
    #: declared ones so changed; with uv they are uv's overrides (and excludes) of one resolution
    overrides: tuple[tuple[str, str], ...] = ()
    #: what installs it: "pip", or "uv" where pip's resolver cannot reconcile the pins that are left
    #: (bridge/agents/adapters/installs.py)
    resolver: Literal["pip", "uv"] = "pip"
    #: installed beside the distribution: what it imports without declaring it
    also: tuple[str, ...] = ()
    #: the oldest Python the pinned release accepts (its Requires-Python), when newer than 3.11
    python_min: tuple[int, int] | None = None

    @property
    def requirement(self) -> str:
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.dist}{extras}=={self.pin}"


def env_dir(framework: Framework) -> Path:
    """Where `rgbridge agents install NAME` builds the framework's environment (outside the data
    home, which no sandbox may see: bridge/locations.py)."""
    return agents_home() / framework.name / framework.pin


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def home_python(home: Path | None) -> str | None:
    """`--agent-home DIR`: the Python of a user's own virtual environment holding the framework (a
    checkout of it installed there with `pip install -e`), bound read-only like an installed one."""
    if home is None:
        return None
    python = env_python(Path(home).expanduser().absolute())
    if not python.exists():
        raise AgentError(f"--agent-home {home}: not a virtual environment (no bin/python in it)")
    return str(python)


#: written last by `rgbridge agents install` (bridge/agents/adapters/installs.py): the environment is complete
INSTALL_MARKER = "install.json"


def locate(framework: Framework) -> str | None:
    """The Python of the environment `rgbridge agents install` completed, if any."""
    env = env_dir(framework)
    python = env_python(env)
    return str(python) if python.is_file() and (env / INSTALL_MARKER).is_file() else None


def build(framework: Framework, setup: AttemptSetup) -> Launch:
    driver_dir = setup.home / DRIVER_DIR
    config = {
        "framework": framework.name,
        "dist": framework.dist,
        "workspace": str(setup.workspace),
        "home": str(setup.home),
        "prompt": setup.prompt,
        "model": setup.model,
        # through the run's model gateway when it has one: the key stays on the host
        "base_url": setup.door.url + "/v1" if setup.door is not None else setup.model_base_url,
    }
    env = base_env(adapter_of(framework), setup)
    if setup.door is not None:
        env[KEY_ENV] = setup.door.token  # the attempt's placeholder, worthless outside it
        env["OPENAI_BASE_URL"] = setup.door.url + "/v1"
    env.update(
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",  # the environment is read-only
        MPLBACKEND="Agg",
        MPLCONFIGDIR=str(setup.home / ".config" / "matplotlib"),
        # Qwen-Agent keeps its own files (tool folders, caches) under this folder, else in the cwd
        QWEN_AGENT_DEFAULT_WORKSPACE=str(setup.home / "qwen-agent"),
    )
    files = {
        driver_dir / "library_driver.py": DRIVER.read_text(encoding="utf-8"),
        driver_dir / "config.json": json.dumps(config, indent=2),
    }
    argv = [setup.binary, "-I", str(driver_dir / "library_driver.py"), str(driver_dir / "config.json")]
    return Launch(argv=argv, env=env, files=files, cwd=setup.workspace)


def parse(events: list[dict[str, Any]], prompt: str) -> ParsedRun:
    run = ParsedRun.prompted(prompt)
    calls: list[dict[str, Any]] = []
    reported: Failure | None = None
    for n, ev in enumerate(map(run.at, events)):
        kind = ev.get("type")
        if kind == "message":
            run.final_message = clip(ev.get("text", ""))
            run.add(Step("agent", message=run.final_message))
        elif kind == "tool_call":
            call_id = f"call-{n}"
            run.add(Step("agent", calls=[Call(call_id, clip(ev.get("name", ""), 200), arguments(ev.get("arguments")))]))
        elif kind == "tool_result":
            step = run.steps[-1] if run.steps and run.steps[-1].calls else None
            if step is not None:
                step.results.append((step.calls[-1].call_id, clip(ev.get("text", ""))))
        elif kind == "moved":
            files = [str(f)[:500] for f in as_list(ev.get("files"))]
            step = run.add(Step("agent", message=f"moved {as_int(ev.get('count')) or 0} file(s) into the workspace"))
            step.calls.append(Call(f"moved-{n}", "move_generated", {"source": clip(ev.get("source", ""), 500)}))
            step.results.append((f"moved-{n}", clip(files)))
        elif kind == "model_call":
            calls.append(as_dict(ev))
        elif kind == "start":
            run.model = clip(ev.get("model", ""), 200) or None
        elif kind == "error":
            cls, message = str(ev.get("class", "")), clip_message(str(ev.get("message", "")))
            run.errors.append(message)
            reported = Failure("cli_missing" if cls == "cli_missing" else "cli_crash", message)
        elif kind == "end":
            run.answered = reported is None
    run.failure = failure_of(calls, reported)
    return run


def failure_of(calls: list[dict[str, Any]], reported: Failure | None) -> Failure | None:
    """The attempt's failure from what the wire showed and what the driver reported: a refused key
    on any call is `auth` (no later call can be trusted to the agent); otherwise the last call's
    failure when the run ended on it (frameworks retry, and some swallow the error and stop); a
    framework missing stays `cli_missing`; one that raised is `cli_crash`, and so is one that
    never got an answer from the model."""
    if reported is not None and reported.cls == "cli_missing":
        return reported
    for call in calls:
        if from_status(call.get("status")) == "auth":
            return Failure("auth", f"the model endpoint answered {call.get('status')} to {call.get('path', '')}")
    last = calls[-1] if calls else None
    cls = call_failure(last) if last is not None else None
    if last is not None and cls is not None:  # the run ended on the provider's failure
        return Failure(cls, f"the model endpoint's last answer: {last.get('status') or last.get('error')}")
    if reported is not None:
        return reported
    if not any(ok(c) for c in calls):
        return Failure("cli_crash", "the framework ended without a single answer from the model")
    return None


def ok(call: dict[str, Any]) -> bool:
    status = as_int(call.get("status"))
    return status is not None and 200 <= status < 300


def call_failure(call: dict[str, Any]) -> FailureClass | None:
    cls = from_status(call.get("status"))
    if cls is None and call.get("error"):
        cls = classify_text(str(call["error"])) or "provider_unavailable"
    return cls


def adapter_of(framework: Framework) -> Adapter:
    return Adapter(
        name=framework.name,
        client="cursor",  # unused: a library agent has no MCP client, the run submits for it
        binaries=(),
        wheel=None,
        version_args=("-c", VERSION_CODE, framework.dist),
        env_allow=(KEY_ENV, "OPENAI_BASE_URL"),
        isolation_env={},
        build=partial(build, framework),
        parse=parse,
        installed_by=f"rgbridge agents install {framework.name}, or --agent-home DIR",
        key_env=(KEY_ENV,),
        installed_binary=partial(locate, framework),
        library=framework,
        offers_bridge_tools=False,  # no MCP client: the run submits for it
    )
