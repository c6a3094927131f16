"""The prompt an agent gets (`rgbridge run --prompt bridge|upstream|file`, `--show-prompt`).

A prompt is a template with named fields (`{readme}`, `{task_id}`, ...: `FIELDS`), filled per task:

- `bridge` (default): the bridge's instructions for a session the run has already opened, the
  time the agent has and how to submit before it ends, the rules (bridge/sessions/rules.py) and
  the task's README;
- `upstream`: the template of the RepoGenesis repository's own generation script at the root of
  the checkout given with `--dataset` (`gen_and_eval.py` for Python, `gen_and_eval_Java.py` for
  Java), read with `ast` (never run): the f-string that holds the README and the requirements
  (Java: the pom) reference and the `start.sh` rules, filled as the script fills it from the
  README-only variant of the task (`repo_readme_verified_python_no_t/<Task>/`,
  `repo_readme_verified_java_no_t_with_p/<Task>/` with its `pom.xml`), then dedented and
  stripped as the script does; one sentence with the time limit follows it (the paper's runs had
  none: the row records the limit and the template's hash);
- `file`: a template of the user's (`--prompt-file F`) with the same fields; `{{` and `}}` are
  literal braces. A template that uses neither `{time_limit}` nor `{time_limit_seconds}` gets the
  same sentence.

The template's hash (`PromptTemplate.digest`) goes into the row and the run's configuration hash.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bridge.agents.adapters.base import AgentError
from bridge.agents.adapters.mcp_configs import SERVER_KEY
from bridge.sessions.rules import rules_text
from bridge.tasks.dataset import README_DIRS
from bridge.tasks.model import Task

PromptKind = Literal["bridge", "upstream", "file"]
PROMPT_KINDS: tuple[str, ...] = ("bridge", "upstream", "file")

#: the fields a template may use
FIELDS = (
    "task_id",
    "title",
    "lang",
    "port",
    "server",
    "rules",
    "readme",
    "requirements",
    "pom",
    "time_limit",
    "time_limit_seconds",
    "library_rules",
)

#: the generation script of each language at the root of a RepoGenesis checkout
UPSTREAM_SCRIPTS = {"python": "gen_and_eval.py", "java": "gen_and_eval_Java.py"}
#: what the scripts name the values they fill in (their `read_readme`, `read_requirements`, `read_pom`)
UPSTREAM_NAMES = {"readme_text": "readme", "requirements_text": "requirements", "pom_text": "pom"}
#: the README names upstream's `read_readme` tries, in its order
UPSTREAM_READMES = ("README.md", "readme.md", "README", "Readme.md")
MAX_TEMPLATE_BYTES = 256 * 1024

BRIDGE_TEMPLATE = (
    "You are solving the benchmark task '{task_id}' ({title}) unattended.\n"
    "A recorded session for it is already open in your current working folder, the workspace; the "
    "'{server}' MCP server's tools act on it (start_task is not needed: it answers that the session "
    "is open). Write the whole service into this folder with your own file tools.\n"
    "You have {time_limit} of wall-clock time. When the service is complete, call the MCP tool "
    "submit_task once, then stop; scoring runs after you finish. Submit before the time is up: at the "
    "limit you are stopped and the folder is submitted as you left it, as it is if you stop without "
    "submitting.\n\n"
    "{rules}\n"
    "The task's README (the whole specification) follows.\n\n"
    "{readme}"
)
#: `bridge` for a library agent (bridge/agents/adapters/library.py): no MCP client, the run submits its folder
LIBRARY_TEMPLATE = (
    "You are solving the benchmark task '{task_id}' ({title}) unattended. Write the whole service "
    "into your current working folder, the workspace, with your own tools.\n"
    "You have {time_limit} of wall-clock time. When you stop, or at the limit, the folder is scored "
    "as you left it.\n\n"
    "{library_rules}\n"
    "The task's README (the whole specification) follows.\n\n"
    "{readme}"
)
TIME_SENTENCE = "\n\nYou have {time_limit} of wall-clock time for this task."

_FIELD = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")


@dataclass(frozen=True)
class Piece:
    """One language's template: its text with `{field}`s, and what upstream does after filling it."""

    text: str
    dedent: bool = False
    strip: bool = False


@dataclass(frozen=True)
class PromptTemplate:
    kind: PromptKind
    source: str  # "bridge", the script or the file it was read from
    pieces: dict[str, Piece]  # by language ("*": any)
    checkout: Path | None = None  # upstream: where the README-only variants are
    fields_used: frozenset[str] = field(default_factory=frozenset)

    @property
    def digest(self) -> str:
        """sha256 of the template itself (its text and post-processing per language), not of a
        rendered prompt: the same for every task of a run."""
        doc = {
            "kind": self.kind,
            "pieces": {k: [p.text, p.dedent, p.strip] for k, p in sorted(self.pieces.items())},
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def piece(self, lang: str) -> Piece:
        found = self.pieces.get(lang) or self.pieces.get("*")
        if found is None:
            raise AgentError(f"--prompt {self.kind}: no template for {lang} tasks ({self.source})")
        return found

    def render(self, task: Task, time_limit: float) -> str:
        piece = self.piece(task.lang)
        values = self._values(task, time_limit)
        text = fill(piece.text, values)
        if piece.dedent:
            text = textwrap.dedent(text)
        if piece.strip:
            text = text.strip()
        if not fields_of(piece.text) & {"time_limit", "time_limit_seconds"}:
            text += fill(TIME_SENTENCE, values)
        return text

    def _values(self, task: Task, time_limit: float) -> dict[str, str]:
        values = {
            "task_id": task.id,
            "title": task.manifest.title,
            "lang": task.lang,
            "port": str(task.port),
            "server": SERVER_KEY,
            "rules": rules_text(task),
            "library_rules": rules_text(task, submit=False),
            "readme": task.readme,
            "requirements": _seed_text(task, "requirements.txt"),
            "pom": _seed_text(task, "pom.xml"),
            "time_limit": describe_seconds(time_limit),
            "time_limit_seconds": f"{time_limit:g}",
        }
        if self.kind == "upstream":
            values.update(upstream_inputs(self.checkout, task))
        return values


def fields_of(text: str) -> set[str]:
    return {m.group(1) for m in _FIELD.finditer(text) if m.group(1)}


def fill(text: str, values: dict[str, str]) -> str:
    """`{name}` -> its value, `{{`/`}}` -> a brace; nothing else is interpreted (no attribute or
    index lookups, no format specs: a template is data)."""

    def one(m: re.Match[str]) -> str:
        token = m.group(0)
        if token in ("{{", "}}"):
            return token[0]
        name = m.group(1)
        if name is None:
            raise AgentError(f"prompt template: a lone {token!r} (write {token * 2} for a literal brace)")
        if name not in values:
            raise AgentError(f"prompt template: unknown field {{{name}}} (fields: {', '.join(FIELDS)})")
        return values[name]

    return _FIELD.sub(one, text)


def describe_seconds(seconds: float) -> str:
    if seconds >= 120 and seconds % 60 == 0:
        return f"{int(seconds // 60)} minutes"
    return f"{seconds:g} seconds"


def _seed_text(task: Task, name: str) -> str:
    path = task.seed_files.get(name)
    try:
        return path.read_text(encoding="utf-8", errors="ignore") if path is not None else ""
    except OSError:
        return ""


# ----------------------------------------------------------------------------- loading


def bridge_template(*, library: bool = False) -> PromptTemplate:
    """The bridge's own prompt; `library`: for an agent without an MCP client (the run submits)."""
    text = LIBRARY_TEMPLATE if library else BRIDGE_TEMPLATE
    return PromptTemplate("bridge", "bridge", {"*": Piece(text)}, fields_used=frozenset(fields_of(text)))


def file_template(path: Path) -> PromptTemplate:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AgentError(f"--prompt-file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_TEMPLATE_BYTES:
        raise AgentError(f"--prompt-file {path}: larger than {MAX_TEMPLATE_BYTES} bytes")
    text = raw.decode("utf-8", errors="replace")
    used = fields_of(text)
    unknown = sorted(used - set(FIELDS))
    if unknown:
        raise AgentError(f"--prompt-file {path}: unknown field(s) {', '.join(unknown)} (fields: {', '.join(FIELDS)})")
    fill(text, dict.fromkeys(FIELDS, ""))  # a lone brace is refused now, not at the first attempt
    return PromptTemplate("file", str(path), {"*": Piece(text)}, fields_used=frozenset(used))


def upstream_template(checkout: Path, langs: set[str], function: str | None = None) -> PromptTemplate:
    """The generation scripts' templates of `langs` from a RepoGenesis checkout (`function`: the
    one of that function of the scripts, a library agent's own)."""
    pieces: dict[str, Piece] = {}
    sources = []
    for lang in sorted(langs):
        script = checkout / UPSTREAM_SCRIPTS[lang]
        pieces[lang] = read_upstream_template(script, function)
        sources.append(f"{script}:{function}" if function else str(script))
    used: set[str] = set()
    for p in pieces.values():
        used |= fields_of(p.text)
    return PromptTemplate("upstream", ", ".join(sources), pieces, checkout=checkout, fields_used=frozenset(used))


def load_template(
    kind: str, *, prompt_file: Path | None, tasks: list[Task], upstream_function: str | None = None
) -> PromptTemplate:
    """The run's template; `upstream_function` is a library agent's function in upstream's scripts
    (bridge/agents/adapters/library.py Framework): its own text for `upstream`, the bridge's text without
    MCP tools for `bridge`."""
    if kind == "bridge":
        return bridge_template(library=upstream_function is not None)
    if kind == "file":
        if prompt_file is None:
            raise AgentError("--prompt file needs --prompt-file F (a template with fields " + ", ".join(FIELDS) + ")")
        return file_template(prompt_file)
    if kind == "upstream":
        checkouts = {upstream_checkout(t) for t in tasks}
        if len(checkouts) != 1:
            raise AgentError("--prompt upstream: the tasks come from more than one RepoGenesis checkout")
        return upstream_template(checkouts.pop(), {t.lang for t in tasks}, upstream_function)
    raise AgentError(f"--prompt {kind!r}: choose from {', '.join(PROMPT_KINDS)}")


def upstream_checkout(task: Task) -> Path:
    """The RepoGenesis checkout a dataset task was loaded from (`<checkout>/repo/<Task>`)."""
    if task.source != "dataset":
        raise AgentError(
            f"--prompt upstream: task {task.id!r} is not from a RepoGenesis checkout; give the checkout with "
            "--dataset DIR (its generation scripts hold the prompt)"
        )
    return task.root.parent.parent


def read_upstream_template(script: Path, function: str | None = None) -> Piece:
    """The prompt template of an upstream generation script, parsed (never executed): the first
    f-string holding the README and a requirements or POM reference, the `start.sh` rules and
    the tests-directory rule, with each `{name}` it interpolates mapped to a field; whether the
    script dedents (`textwrap.dedent(...)`) and strips (`.strip()`) the filled text. With
    `function`, the first such f-string inside the script's function of that name (the scripts
    hold one per framework: `metagpt_generate`, `qwen_agent_generate`, ...)."""
    try:
        source = script.read_text(encoding="utf-8")
    except OSError:
        raise AgentError(
            f"--prompt upstream: {script} is missing (the RepoGenesis checkout's generation script holds "
            "the prompt template)"
        ) from None
    try:
        tree = ast.parse(source, filename=str(script))
    except SyntaxError as exc:
        raise AgentError(f"--prompt upstream: {script}: not Python ({exc.msg}, line {exc.lineno})") from None
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    scope: ast.AST = tree
    if function is not None:
        found = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function), None)
        if found is None:
            raise AgentError(
                f"--prompt upstream: {script} has no {function}() (the function upstream drives this framework with)"
            )
        scope = found
    for node in ast.walk(scope):
        if not isinstance(node, ast.JoinedStr):
            continue
        text = _template_text(node)
        if text is None or not _is_prompt(text):
            continue
        dedent, strip = _post_processing(node, parents)
        return Piece(text, dedent=dedent, strip=strip)
    raise AgentError(
        f"--prompt upstream: {script}{f' {function}()' if function else ''} holds no prompt template (an "
        "f-string with the README, a requirements or POM reference and the start.sh rules)"
    )


def _template_text(node: ast.JoinedStr) -> str | None:
    """The f-string as a template: literal parts with braces doubled, `{readme_text}` ->
    `{readme}`; None when it interpolates anything but a known plain name."""
    parts: list[str] = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value.replace("{", "{{").replace("}", "}}"))
        elif (
            isinstance(value, ast.FormattedValue)
            and isinstance(value.value, ast.Name)
            and value.value.id in UPSTREAM_NAMES
            and value.conversion == -1
            and value.format_spec is None
        ):
            parts.append("{" + UPSTREAM_NAMES[value.value.id] + "}")
        else:
            return None
    return "".join(parts)


def _is_prompt(text: str) -> bool:
    return (
        "{readme}" in text
        and ("{requirements}" in text or "{pom}" in text)
        and "start.sh" in text
        and "tests directory" in text
    )


def _post_processing(node: ast.AST, parents: dict[int, ast.AST]) -> tuple[bool, bool]:
    dedent = strip = False
    call = parents.get(id(node))
    if isinstance(call, ast.Call) and node in call.args and _callee(call) == "dedent":
        dedent = True
        node = call
    outer = parents.get(id(node))
    if isinstance(outer, ast.Attribute) and outer.attr == "strip":
        strip = isinstance(parents.get(id(outer)), ast.Call)
    return dedent, strip


def _callee(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def upstream_inputs(checkout: Path | None, task: Task) -> dict[str, str]:
    """What the scripts fill in for a task: the README-only variant's README, and its
    requirements.txt (Python; empty when absent, as `read_requirements`) or pom.xml (Java)."""
    if checkout is None:
        raise AgentError("--prompt upstream needs --dataset DIR (a RepoGenesis checkout)")
    variant = checkout / README_DIRS[task.lang] / task.id
    if not variant.is_dir():
        raise AgentError(f"--prompt upstream: {variant} is missing (the README-only variant upstream gives its agents)")
    readme = next((variant / n for n in UPSTREAM_READMES if (variant / n).is_file()), None)
    if readme is None:
        raise AgentError(f"--prompt upstream: {variant} has no README")
    values = {"readme": readme.read_text(encoding="utf-8", errors="ignore")}
    if task.lang == "java":
        pom = variant / "pom.xml"
        if not pom.is_file():
            raise AgentError(f"--prompt upstream: {pom} is missing (upstream gives Java agents the pom)")
        values["pom"] = pom.read_text(encoding="utf-8", errors="ignore")
    else:
        reqs = variant / "requirements.txt"
        values["requirements"] = reqs.read_text(encoding="utf-8", errors="ignore") if reqs.is_file() else ""
    return values


def agent_prompt(task: Task, time_limit: float = 1800.0) -> str:
    """The bridge's prompt for one task (`--prompt bridge`)."""
    return bridge_template().render(task, time_limit)
