"""The in-sandbox driver of a library agent: `python -I library_driver.py CONFIG`, run by the
framework's own Python (its virtual environment, bound read-only) inside the attempt's sandbox.

Standard library only: the bridge never imports the framework, the driver never imports the
bridge. It reads its configuration (framework, workspace, prompt, model, endpoint; the key comes
from its environment as OPENAI_API_KEY), calls the framework's own entry point as the RepoGenesis
generation script does (MetaGPT `generate_repo`, Qwen-Agent `Assistant` with `code_interpreter`,
MS-Agent `LLMAgent`, DeepCode's `CodeImplementationWorkflow`), and reports on the stdout it was
given one JSON event per line (bridge/agents/adapters/library.py reads them back):

- `start` (framework and version), `message`, `tool_call`, `tool_result` as the framework's own
  history shows them;
- `model_call`: each HTTP exchange with the model endpoint (status, or the connection error),
  seen on the wire of httpx (or `httpx2`, which newer OpenAI SDKs ship), the HTTP client every
  one of the four frameworks talks OpenAI through: a framework that swallows a provider error
  still shows it here;
- `moved`: files the framework wrote outside the workspace, moved in as upstream does;
- `error` (`class`: cli_missing when the framework cannot be imported, cli_crash when it raises)
  and `end` (the files now in the workspace).

Everything the framework prints goes to stderr: stdout carries events only.

Why this module is long: it is one file, written into the attempt's HOME and run by the
framework's own Python, which cannot import the bridge; the four frameworks' runners, the wire
watch and the move out of a framework's folder have to travel together.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import shutil
import signal
import sys
import textwrap
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

#: OpenAI's documented default endpoint, used when the run names none (upstream's default too)
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"  # upstream's default for MetaGPT
MAX_TEXT = 4000
#: what a framework keeps of its own in the workspace's place (not the agent's work)
EXIT_FAILED = 3


class Events:
    """One JSON object per line on the stdout the driver was started with."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()

    def emit(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"type": kind, **fields}, ensure_ascii=False, default=str)
        with self.lock:
            self.out.write(line + "\n")
            self.out.flush()


def clip(value: object, limit: int = MAX_TEXT) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


def events_on_stdout() -> Events:
    """Events keep the real stdout; fd 1 becomes stderr, so the framework's prints and its child
    processes' output never mix with them."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return Events(out)


# ----------------------------------------------------------------------------- the wire


#: the HTTP clients the frameworks' OpenAI SDKs send through (newer SDKs ship theirs as `httpx2`)
HTTP_MODULES = ("httpx", "httpx2")


def watch_wire(events: Events, base_url: str) -> None:
    """Every request to the model endpoint and its answer's status (or the error that ended it),
    from the `send` of the HTTP client the OpenAI SDK and the frameworks' own clients use."""
    prefix = base_url.rstrip("/")
    for name in HTTP_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        watch_client(events, prefix, module)


def watch_client(events: Events, prefix: str, httpx: Any) -> None:
    def ours(request: Any) -> bool:
        return str(request.url).startswith(prefix)

    def report(request: Any, started: float, status: int | None, error: BaseException | None) -> None:
        fields: dict[str, Any] = {"path": request.url.path[:200], "seconds": round(time.monotonic() - started, 3)}
        if status is not None:
            fields["status"] = status
        if error is not None:
            fields["error"] = clip(f"{type(error).__name__}: {error}", 300)
        events.emit("model_call", **fields)

    sync_send = httpx.Client.send
    async_send = httpx.AsyncClient.send

    def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if not ours(request):
            return sync_send(self, request, *args, **kwargs)
        started = time.monotonic()
        try:
            response = sync_send(self, request, *args, **kwargs)
        except BaseException as exc:
            report(request, started, None, exc)
            raise
        report(request, started, response.status_code, None)
        return response

    async def asend(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if not ours(request):
            return await async_send(self, request, *args, **kwargs)
        started = time.monotonic()
        try:
            response = await async_send(self, request, *args, **kwargs)
        except BaseException as exc:
            report(request, started, None, exc)
            raise
        report(request, started, response.status_code, None)
        return response

    httpx.Client.send = send
    httpx.AsyncClient.send = asend


# ----------------------------------------------------------------------------- the frameworks


class Setup:
    def __init__(self, config: dict[str, Any]) -> None:
        self.framework = str(config["framework"])
        self.workspace = Path(config["workspace"])
        self.home = Path(config["home"])
        self.prompt = str(config["prompt"])
        self.model = str(config.get("model") or DEFAULT_MODEL)
        self.base_url = str(config.get("base_url") or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)
        self.key = os.environ.get("OPENAI_API_KEY", "")
        self.dist = str(config["dist"])


def user_message(setup: Setup) -> str:
    """The user turn of the frameworks that take the prompt as their instructions (the bridge's
    own words: upstream's second message is not reproduced)."""
    return (
        "Implement the complete project described in your instructions now.\n"
        f"Current working directory: {setup.workspace}\n"
        "Write every file of the project under that folder (use absolute paths)."
    )


def run_qwen_agent(setup: Setup, events: Events) -> None:
    """Qwen-Agent's `Assistant` with its `code_interpreter` tool: the prompt as the system message
    (upstream's `system_instruction`), its work folder under the attempt's HOME."""
    assistant = importlib.import_module("qwen_agent.agents").Assistant
    llm = {"model": setup.model, "model_server": setup.base_url, "api_key": setup.key}
    tool = {"name": "code_interpreter", "work_dir": str(setup.home / "qwen-agent" / "code_interpreter")}
    bot = assistant(llm=llm, system_message=setup.prompt, function_list=[tool])
    messages = [{"role": "user", "content": user_message(setup)}]
    os.chdir(setup.workspace)
    last: list[Any] = []
    for response in bot.run(messages=messages):
        last = response if isinstance(response, list) else last
    for message in last:
        report_qwen_message(events, message)


def report_qwen_message(events: Events, message: Any) -> None:
    get = message.get if isinstance(message, dict) else lambda k, d=None: getattr(message, k, d)
    role, content = get("role"), get("content")
    call = get("function_call")
    if role == "assistant" and call:
        name = call.get("name") if isinstance(call, dict) else getattr(call, "name", "")
        args = call.get("arguments") if isinstance(call, dict) else getattr(call, "arguments", "")
        events.emit("tool_call", name=clip(name, 200), arguments=clip(args))
    elif role == "assistant" and content:
        events.emit("message", role="assistant", text=clip(content))
    elif role == "function":
        events.emit("tool_result", name=clip(get("name") or "", 200), text=clip(content or ""))


def run_ms_agent(setup: Setup, events: Events) -> None:
    """MS-Agent's `LLMAgent` with upstream's configuration (OpenAI service, the endpoint, temperature
    1, streaming, 100 rounds; the key from the environment, not the configuration) plus its own
    `file_system` tool rooted at the workspace: upstream configured no tool, so its LLMAgent could
    only answer in text."""
    omegaconf = importlib.import_module("omegaconf")
    llm_agent = importlib.import_module("ms_agent").LLMAgent
    config = omegaconf.OmegaConf.create(
        {
            "llm": {
                "service": "openai",
                "model": setup.model,
                # no key here: MS-Agent saves this configuration into the output folder (the repo's
                # `.memory/`); its OpenAI client reads OPENAI_API_KEY from the environment instead
                "openai_base_url": setup.base_url,
            },
            "generation_config": {"temperature": 1, "stream": True},
            "max_chat_round": 100,
            "callbacks": [],
            "output_dir": str(setup.workspace),
            "tools": {"file_system": {"mcp": False}},
        }
    )
    os.chdir(setup.workspace)
    sys.argv = [sys.argv[0]]  # MS-Agent reads its own command line (as upstream notes)

    async def go() -> Any:
        agent = llm_agent(config=config)
        return await agent.run(setup.prompt)

    result = asyncio.run(go())
    for message in result if isinstance(result, list) else []:
        role = getattr(message, "role", None)
        for call in getattr(message, "tool_calls", None) or []:
            get = call.get if isinstance(call, dict) else lambda k, d=None, c=call: getattr(c, k, d)
            events.emit(
                "tool_call", name=clip(get("tool_name") or get("name") or "", 200), arguments=clip(get("arguments"))
            )
        content = getattr(message, "content", None)
        if role == "assistant" and content:
            events.emit("message", role="assistant", text=clip(content))
        elif role == "tool":
            events.emit("tool_result", name=clip(getattr(message, "name", "") or "", 200), text=clip(content or ""))


def prepare_metagpt(setup: Setup) -> None:
    """MetaGPT's `config2.yaml` in its home folder (`~/.metagpt` of the attempt's HOME), read when
    it is imported: the endpoint and model, a stand-in for the key (set in memory afterwards)."""
    config_dir = setup.home / ".metagpt"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config2.yaml").write_text(
        textwrap.dedent(
            f"""\
            llm:
              api_type: "openai"
              model: {json.dumps(setup.model)}
              base_url: {json.dumps(setup.base_url)}
              api_key: "set-in-memory-by-the-driver"
            """
        ),
        encoding="utf-8",
    )


def run_metagpt(setup: Setup, events: Events) -> None:
    """MetaGPT's `generate_repo` with upstream's arguments (the prompt as its idea, project path =
    the workspace, implement, code review, 5 rounds, investment 3.0). Its configuration file lives
    in the attempt's HOME and holds no key: the key is set in memory.

    The project path turns on 0.8.2's incremental mode, whose WriteCode reads the project's source
    folder (`<project>/<project name>/`) as a repository that must already exist, else it raises
    `ValueError: Call with_srcs first.` (MetaGPT issue #2007): that folder is created, empty, first;
    what MetaGPT wrote into it is moved up into the workspace afterwards (`move_generated`)."""
    key_metagpt(setup.key)
    generate_repo = importlib.import_module("metagpt.software_company").generate_repo
    sources = metagpt_sources(setup.workspace)
    os.chdir(setup.workspace)
    try:
        generate_repo(
            idea=setup.prompt,
            project_name=setup.workspace.name,
            inc=False,
            project_path=str(setup.workspace),
            implement=True,
            run_tests=False,
            code_review=True,
            n_round=5,
            investment=3.0,
        )
    finally:
        move_generated(sources, setup.workspace, events)


def key_metagpt(key: str) -> None:
    """The key, in memory, on every configuration MetaGPT holds: its module's `config`, the
    `Config` each `Context` starts from (the roles `generate_repo` hires make their own Context,
    and their model clients, from it) and any `Config.default()` made later. Each of those read
    `config2.yaml`, whose key is a stand-in."""
    config2 = importlib.import_module("metagpt.config2")
    context = importlib.import_module("metagpt.context")
    loaded = config2.Config.default

    def default(_cls: Any) -> Any:
        made = loaded()
        made.llm.api_key = key
        return made

    config2.Config.default = classmethod(default)
    for config in (config2.config, context.Context.model_fields["config"].default):
        config.llm.api_key = key


def metagpt_sources(workspace: Path) -> Path:
    """MetaGPT's source folder of a project at `workspace` (its ProjectRepo: the folder named as
    the project inside it), created empty unless the agent's workspace already has one (a file or
    link of that name is left alone: MetaGPT then fails on it, its own result)."""
    sources = workspace / workspace.name
    if not sources.exists() and not sources.is_symlink():
        sources.mkdir()
    return sources


def prepare_deepcode(setup: Setup) -> None:
    """DeepCode's configuration, read when its runtime starts: `deepcode_config.json` in its home
    (`DEEPCODE_HOME`, in the attempt's HOME) naming the endpoint as its `custom` OpenAI-compatible
    provider; the key is a `${OPENAI_API_KEY}` reference DeepCode resolves from the environment."""
    home = setup.home / ".deepcode"
    home.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "agents": {"defaults": {"provider": "custom", "model": setup.model}},
        "providers": {"custom": {"apiBase": setup.base_url, "apiKey": "${OPENAI_API_KEY}"}},
    }
    # the MCP servers its code-implementation workflow asks for, from the installed package (a
    # checkout configures them in its own config file, which upstream's runs used)
    servers = {}
    for name, module in (
        ("code-implementation", "tools.code_implementation_server"),
        ("command-executor", "tools.command_executor"),
    ):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):  # DeepCode is not there: the import below says so
            spec = None
        if spec is not None and spec.origin:
            servers[name] = {"type": "stdio", "command": sys.executable, "args": [spec.origin]}
    config["tools"] = {"mcpServers": servers}
    (home / "deepcode_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    os.environ["DEEPCODE_HOME"] = str(home)


def run_deepcode(setup: Setup, events: Events) -> None:
    """DeepCode's code-implementation workflow in pure code mode without read tools, given a plan
    file made of the prompt in the workspace (`initial_plan.txt`, as upstream); what it wrote under
    `generate_code/` is then moved up (`move_generated`)."""
    workflow_cls = importlib.import_module("workflows.code_implementation_workflow").CodeImplementationWorkflow
    plan = setup.workspace / "initial_plan.txt"
    plan.write_text(setup.prompt, encoding="utf-8")
    generated = setup.workspace / "generate_code"
    generated.mkdir(parents=True, exist_ok=True)
    os.chdir(setup.workspace)
    try:
        asyncio.run(
            workflow_cls().run_workflow(
                plan_file_path=str(plan),
                target_directory=str(setup.workspace),
                pure_code_mode=True,
                enable_read_tools=False,
            )
        )
    finally:
        move_generated(generated, setup.workspace, events)


def move_generated(source: Path, workspace: Path, events: Events) -> None:
    """Files a framework wrote into a folder of its own, moved up into the workspace (upstream
    flattens DeepCode's `generate_code/` one level the same way, overwriting); the folder is
    removed so that the repo holds one copy; the `moved` event lists them."""
    if not source.is_dir() or source.is_symlink():
        return
    moved: list[str] = []
    for path in sorted(source.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(source)
        target = workspace / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
        moved.append(rel.as_posix())
    shutil.rmtree(source, ignore_errors=True)
    events.emit("moved", source=str(source), files=moved[:500], count=len(moved))


RUNNERS: dict[str, Callable[[Setup, Events], None]] = {
    "qwen-agent": run_qwen_agent,
    "ms-agent": run_ms_agent,
    "metagpt": run_metagpt,
    "deepcode": run_deepcode,
}
#: what a framework reads when it is imported, written first
PREPARE: dict[str, Callable[[Setup], None]] = {"metagpt": prepare_metagpt, "deepcode": prepare_deepcode}
#: the module whose import failing means the framework is not there (cli_missing)
ENTRY_MODULES = {
    "qwen-agent": "qwen_agent.agents",
    "ms-agent": "ms_agent",
    "metagpt": "metagpt.software_company",
    "deepcode": "workflows.code_implementation_workflow",
}


#: frameworks whose files are moved into the workspace when they end (`move_generated`): the
#: time limit's SIGTERM unwinds them (`Terminated`) so that the move runs before the SIGKILL
MOVES_ON_END = frozenset({"metagpt", "deepcode"})


class Terminated(BaseException):
    """SIGTERM (the attempt's end: its time limit, or the run stopping) raised in the framework."""


def terminated(_signum: int, _frame: object) -> None:
    raise Terminated()


def written(workspace: Path) -> list[str]:
    return sorted(p.relative_to(workspace).as_posix() for p in workspace.rglob("*") if p.is_file())[:500]


def version_of(dist: str) -> str:
    try:
        return str(importlib.import_module("importlib.metadata").version(dist))
    except Exception:
        return "unknown"


def main(argv: list[str]) -> int:
    events = events_on_stdout()
    config = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    setup = Setup(config)
    events.emit("start", framework=setup.framework, version=version_of(setup.dist), model=setup.model)
    # imported from a folder of the attempt's HOME: MS-Agent opens its log file in the cwd on import
    own = setup.home / setup.framework
    own.mkdir(parents=True, exist_ok=True)
    os.chdir(own)
    prepare = PREPARE.get(setup.framework)
    if prepare is not None:
        prepare(setup)
    try:
        importlib.import_module(ENTRY_MODULES[setup.framework])
    except Exception as exc:  # any failure to import is the framework's absence, never the agent's work
        events.emit("error", **{"class": "cli_missing", "message": clip(f"{type(exc).__name__}: {exc}", 500)})
        return EXIT_FAILED
    watch_wire(events, setup.base_url)
    if setup.framework in MOVES_ON_END:
        signal.signal(signal.SIGTERM, terminated)
    try:
        RUNNERS[setup.framework](setup, events)
    except Terminated:  # ended from outside, not a failure of its own: what it wrote is moved and kept
        return 128 + signal.SIGTERM
    except BaseException as exc:
        traceback.print_exc()
        events.emit("error", **{"class": "cli_crash", "message": clip(f"{type(exc).__name__}: {exc}", 500)})
        events.emit("end", files=written(setup.workspace))
        return EXIT_FAILED
    events.emit("end", files=written(setup.workspace))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
