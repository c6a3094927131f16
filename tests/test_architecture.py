"""The import graph matches docs/architecture.md: no cycles (function-level and `TYPE_CHECKING`
imports included), and imports only point down the layers, so a newcomer can read the flow from `ls`."""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# Lower layers never import higher ones. Data flows tasks → sessions → recording → scoring →
# reports; the code that performs a step imports the layers it hands work to, so the import
# order is: utilities < tasks < scoring < recording < sessions < reports < agents < view < adapters.
LAYERS: list[tuple[str, ...]] = [
    ("bridge", "bridge.errors", "bridge.textsafe", "bridge.locations", "bridge.fs"),
    ("bridge.tasks",),
    ("bridge.scoring",),
    ("bridge.recording",),
    ("bridge.sessions",),
    ("bridge.reports",),
    ("bridge.agents",),
    ("bridge.view",),
    ("bridge.commands", "bridge.cli"),
    ("mcp_server",),
]
MAX_LINES = 450  # "about 400": the formatter's line breaks vary
LONG_MODULE_NOTE = "Why this module is long:"


@functools.cache
def _parse(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for all the checks here (none of them changes it)."""
    return ast.parse(path.read_text(), str(path))


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in ("bridge", "mcp_server"):
        for path in (REPO_ROOT / top).rglob("*.py"):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            if "assets" in parts:  # files copied into containers, never imported by the bridge
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        # Every import counts, those under `if TYPE_CHECKING:` and inside functions too: an
        # import only annotations need still ties the two modules together (issue 37).
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def _layer(module: str) -> int:
    best, rank = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank >= 0, f"{module} belongs to no layer: add it to LAYERS and docs/architecture.md"
    return rank


def test_no_import_cycles() -> None:
    graph = _imports(_modules())
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_imports_point_down_the_layers() -> None:
    graph = _imports(_modules())
    wrong = [
        f"{src} imports {dst}"
        for src, targets in graph.items()
        for dst in targets
        if dst != "bridge" and _layer(dst) > _layer(src)
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_bridge_never_imports_the_mcp_adapter() -> None:
    graph = _imports(_modules())
    assert not [
        src
        for src, targets in graph.items()
        if src.startswith("bridge") and any(t.startswith("mcp_server") for t in targets)
    ]


def test_long_modules_say_why() -> None:
    long = [
        f"{name} ({n} lines)"
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
        and LONG_MODULE_NOTE not in (ast.get_docstring(_parse(path)) or "")
    ]
    assert not long, f"modules over {MAX_LINES} lines without '{LONG_MODULE_NOTE}' in their docstring: {long}"


def _contract(path: Path) -> str:
    """A module's row in docs/architecture.md: its docstring's first paragraph on one line."""
    doc = ast.get_docstring(_parse(path)) or ""
    return " ".join(doc.strip().split("\n\n")[0].split()).replace("|", "\\|")


def _module_rows() -> list[tuple[str, str]]:
    """(path, contract) of each row of docs/architecture.md's module table."""
    doc = (REPO_ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \| (.*) \|$", section, flags=re.MULTILINE)


def test_each_module_has_one_row_quoting_its_docstring() -> None:
    modules = {path.relative_to(REPO_ROOT).as_posix(): path for path in _modules().values()}
    rows = _module_rows()
    named = [name for name, _ in rows]
    wrong = [f"| `{name}` | {_contract(path)} |" for name, path in sorted(modules.items()) if name not in named]
    wrong += [
        f"| `{name}` | {_contract(modules[name])} |"
        for name, row in rows
        if name in modules and row != _contract(modules[name])
    ]
    gone = [name for name in named if name not in modules]
    twice = sorted({name for name in named if named.count(name) > 1})
    undocumented = [name for name, path in sorted(modules.items()) if not _contract(path)]
    assert not (wrong or gone or twice or undocumented), (
        "docs/architecture.md's module rows and the modules' docstrings disagree.\n"
        f"Rows naming no module: {gone}\nRows twice: {twice}\nModules without a docstring: {undocumented}\n"
        "Rows as they should read:\n" + "\n".join(wrong)
    )


# Documents that live outside the repository (a team's notes): a reader of the code cannot open them.
OUTSIDE_DOCS = (
    "upstream-scoring.md",
    "anchors.md",
    "mcp-sdk.md",
    "layout-sketch",
    "SPEC.md",
    "shared/reference",
    "shared reference",
)


def test_comments_cite_only_the_repositorys_docs_or_public_sources() -> None:
    found = []
    for top in ("bridge", "mcp_server", "tests", "scripts", "bench", "docs"):
        for path in (REPO_ROOT / top).rglob("*"):
            if path.suffix not in (".py", ".sh", ".md", ".toml", ".ini", ".txt") or not path.is_file():
                continue
            if path == Path(__file__):
                continue
            text = path.read_text(errors="replace")
            found += [f"{path.relative_to(REPO_ROOT)}: {name}" for name in OUTSIDE_DOCS if name in text]
    readme = (REPO_ROOT / "README.md").read_text()
    found += [f"README.md: {name}" for name in OUTSIDE_DOCS if name in readme]
    assert not found, found


def _private_uses(name: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """`from X import _name` and `X._name` in one module, where X is another module of ours."""
    tree = _parse(path)
    aliases: dict[str, str] = {}  # local name -> one of our modules
    found: list[str] = []

    def private(attr: str) -> bool:
        return attr.startswith("_") and not attr.startswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in modules:
            for alias in node.names:
                if private(alias.name) and node.module != name:
                    found.append(f"{name}:{node.lineno} imports {node.module}.{alias.name}")
                elif f"{node.module}.{alias.name}" in modules:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    aliases[alias.asname] = alias.name
                elif alias.name in modules:
                    aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and private(node.attr)):
            continue
        parts: list[str] = []
        value: ast.expr = node.value
        while isinstance(value, ast.Attribute):
            parts.insert(0, value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in aliases:
            continue
        target = ".".join([aliases[value.id], *parts])
        if target in modules and target != name:
            found.append(f"{name}:{node.lineno} uses {target}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names() -> None:
    """A leading underscore means "this module's own": another module that needs the name gets a
    public one, so a reader can trust that a private name has no users elsewhere."""
    modules = _modules()
    found = [use for name, path in sorted(modules.items()) for use in _private_uses(name, path, modules)]
    assert not found, "private names used outside their module:\n" + "\n".join(found)


# Scoring's wings (docs/architecture.md "Scoring wings"): a language wing may use its own modules,
# the run/, sandbox/ and images/ wings and the small shared modules at the top of bridge/scoring/.
SCORING_LANGUAGE_WINGS = ("bridge.scoring.python", "bridge.scoring.java")
SCORING_COMMON_WINGS = ("bridge.scoring.run", "bridge.scoring.sandbox", "bridge.scoring.images")
SCORING_SHARED = {
    f"bridge.scoring.{name}"
    for name in ("coverage", "deploy", "explanations", "grading", "plan", "result", "types", "upstream")
}


def test_a_language_wing_uses_only_its_own_wing_and_the_shared_ones() -> None:
    graph = _imports(_modules())
    wrong = []
    for src, targets in graph.items():
        wing = next((w for w in SCORING_LANGUAGE_WINGS if src == w or src.startswith(w + ".")), None)
        if wing is None:
            continue
        for dst in targets:
            if not dst.startswith("bridge.scoring") or dst in SCORING_SHARED or dst == "bridge.scoring":
                continue
            if any(dst == w or dst.startswith(w + ".") for w in (wing, *SCORING_COMMON_WINGS)):
                continue
            wrong.append(f"{src} imports {dst}")
    assert not wrong, "\n".join(sorted(wrong))


# The images wing (bridge/scoring/images/__init__.py): three sub-packages by concern, imports
# pointing one way (sets -> base -> disk; sets may use disk too), each entered only by its face.
IMAGES = "bridge.scoring.images"
IMAGES_ORDER = ("disk", "base", "sets")  # each may import the ones before it, never after


def _images_sub(module: str) -> str | None:
    parts = module.split(".")
    return parts[3] if module.startswith(IMAGES + ".") and len(parts) > 3 else None


def test_images_holds_only_its_sub_packages_and_its_face() -> None:
    root = REPO_ROOT / "bridge" / "scoring" / "images"
    flat = sorted(p.name for p in root.glob("*.py") if p.name != "__init__.py")
    assert not flat, f"modules left flat in images/: {flat}"
    subs = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert subs == sorted(IMAGES_ORDER)
    face = ast.get_docstring(ast.parse((root / "__init__.py").read_text())) or ""
    for sub in IMAGES_ORDER:
        for path in sorted((root / sub).glob("*.py")):
            if path.name != "__init__.py":
                assert f"``{path.stem}``" in face, f"images/__init__.py's map omits {sub}/{path.name}"


def test_images_sub_packages_import_one_way() -> None:
    graph = _imports(_modules())
    wrong = [
        f"{src} imports {dst}"
        for src, targets in graph.items()
        if (s := _images_sub(src)) is not None
        for dst in targets
        if (d := _images_sub(dst)) is not None and IMAGES_ORDER.index(d) > IMAGES_ORDER.index(s)
    ]
    assert not wrong, "\n".join(sorted(wrong))


def _python_files(*tops: str) -> list[Path]:
    return [path for top in tops for path in sorted((REPO_ROOT / top).rglob("*.py")) if "fixtures" not in path.parts]


def test_images_sub_packages_are_entered_only_by_their_faces() -> None:
    """Outside a sub-package (the rest of images/, bridge/, mcp_server/, tests, bench, scripts),
    only its face is imported; tests may take one of its modules from the face to patch it."""
    wrong = []
    for path in _python_files("bridge", "mcp_server", "tests", "bench", "scripts"):
        rel = path.relative_to(REPO_ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                sub = _images_sub(name)
                if sub is None or len(name.split(".")) == 4:
                    continue
                if not rel.startswith(f"bridge/scoring/images/{sub}/"):
                    wrong.append(f"{rel}:{node.lineno} imports {name}")
    assert not wrong, "\n".join(wrong)


# The agents wing (bridge/agents/__init__.py): sub-packages by concern and nothing flat beside its
# face. Imports point one way along this order; the run's data (its options, the prompt, the
# settings every attempt shares) sits below the attempt, the run's execution above the Ray
# backend it hands attempts to. The longest prefix names a module's place.
AGENTS = "bridge.agents"
AGENTS_ORDER: list[tuple[str, ...]] = [
    ("adapters",),
    ("gateway",),
    ("confine",),
    ("run.options", "run.prompt", "run.settings"),
    ("attempt",),
    ("run.backend",),
    ("ray",),
    ("run",),
]


def _agents_rank(module: str) -> int | None:
    if not module.startswith(AGENTS + "."):
        return None
    inner = module[len(AGENTS) + 1 :]
    best, rank = -1, None
    for index, prefixes in enumerate(AGENTS_ORDER):
        for prefix in prefixes:
            if (inner == prefix or inner.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank is not None, f"{module} has no place in AGENTS_ORDER (tests/test_architecture.py)"
    return rank


def test_agents_holds_only_its_sub_packages_and_its_face() -> None:
    root = REPO_ROOT / "bridge" / "agents"
    flat = sorted(p.name for p in root.glob("*.py") if p.name != "__init__.py")
    assert not flat, f"modules left flat in bridge/agents/: {flat}"
    face = ast.get_docstring(_parse(root / "__init__.py")) or ""
    subs = sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file())
    assert subs, "bridge/agents/ has no sub-packages"
    missing = [sub for sub in subs if f"``{sub}/``" not in face]
    assert not missing, f"bridge/agents/__init__.py's map omits {missing}"


def test_agents_sub_packages_import_one_way() -> None:
    graph = _imports(_modules())
    wrong = [
        f"{src} imports {dst}"
        for src, targets in graph.items()
        if (s := _agents_rank(src)) is not None
        for dst in targets
        if (d := _agents_rank(dst)) is not None and d > s
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_the_agents_order_check_sees_an_annotation_only_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `TYPE_CHECKING` import pointing back up the wing is a wrong direction and a circle."""
    root = tmp_path / "bridge" / "agents"
    for sub in ("confine", "run"):
        (root / sub).mkdir(parents=True)
        (root / sub / "__init__.py").write_text('"""x."""\n')
    (tmp_path / "bridge" / "__init__.py").write_text('"""x."""\n')
    (root / "__init__.py").write_text('"""x."""\n')
    (root / "confine" / "protected.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bridge.agents.run.runner import X\n"
    )
    (root / "run" / "runner.py").write_text("from bridge.agents.confine.protected import Y\n")
    monkeypatch.setitem(globals(), "REPO_ROOT", tmp_path)
    graph = _imports(_modules())
    # both edges: the circle test sees protected -> runner -> protected
    assert "bridge.agents.run.runner" in graph["bridge.agents.confine.protected"]
    assert "bridge.agents.confine.protected" in graph["bridge.agents.run.runner"]
    assert _agents_rank("bridge.agents.run.runner") > _agents_rank("bridge.agents.confine.protected")  # type: ignore[operator]


def test_run_options_are_a_leaf_of_the_wing() -> None:
    """RunOptions (what `run.json` keeps) imports nothing of the agents wing but the sandbox kinds."""
    graph = _imports(_modules())
    inside = {t for t in graph["bridge.agents.run.options"] if t.startswith(AGENTS + ".")}
    assert inside <= {"bridge.agents.confine", "bridge.agents.confine.choose"}, inside


MAX_AGENTS_FUNCTION_LINES = 80


def test_no_function_of_the_agents_wing_is_over_80_lines() -> None:
    """Each step of a run or an attempt reads top to bottom on one screen (issue 37)."""
    long = [
        f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name} ({n} lines)"
        for path in _python_files("bridge/agents")
        for node in ast.walk(_parse(path))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_AGENTS_FUNCTION_LINES
    ]
    assert not long, long


def test_no_command_branch_outside_the_command_adapter() -> None:
    """Adapters declare what differs (bridge/agents/adapters/base.py's hooks); the run never tests
    an adapter's name."""
    allowed = REPO_ROOT / "bridge" / "agents" / "adapters" / "command.py"
    pattern = re.compile(r"""(==|!=|\bin)\s*\(?\s*["']command["']|["']command["']\s*(==|!=)""")
    found = [
        f"{path.relative_to(REPO_ROOT)}:{n}"
        for path in _python_files("bridge", "mcp_server")
        if path != allowed
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found


# ----------------------------------------------------------------------------- the tests themselves

TEST_MODULES = sorted((REPO_ROOT / "tests").glob("test_*.py"))


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of everything a module imports, `from a import b` as `a.b`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def test_no_test_module_imports_another() -> None:
    """Helpers more than one test module needs live in tests/helpers.py (fixtures in conftest.py)."""
    found = [
        f"{path.name}:{line} imports {name}"
        for path in TEST_MODULES
        for line, name in _imported_names(_parse(path))
        if any(part.startswith("test_") for part in name.split(".")[:2])
    ]
    assert not found, found


#: What a test reaches only through its fixture (tests/conftest.py), because the fixture is what
#: puts the test in its lane (`docker`, `agent_cli`) and `scripts/test.sh --fast` leaves it out.
LANE_ENTRIES = {
    "tests.agent_clis.agent_cli": "agent_cli",
    "bridge.scoring.sandbox.docker_client.get_client": "docker_client",
    "docker.from_env": "docker_client",
    "docker.DockerClient": "docker_client",
}


def test_tests_reach_the_engine_and_the_agent_clis_through_their_fixtures() -> None:
    found = []
    for path in TEST_MODULES:
        tree = _parse(path)
        found += [
            f"{path.name}:{line} imports {name}: take the `{LANE_ENTRIES[name]}` fixture"
            for line, name in _imported_names(tree)
            if name in LANE_ENTRIES
        ]
        found += [
            f"{path.name}:{node.lineno} calls docker.{node.func.attr}: take the `docker_client` fixture"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and f"{node.func.value.id}.{node.func.attr}" in LANE_ENTRIES
        ]
    assert not found, found


def _surely_not_empty(node: ast.expr, constants: dict[str, ast.expr]) -> bool:
    """An iterable a for-loop surely runs over at least once: a non-empty literal (or a module
    constant bound to one), `range(N)` with N > 0, `.items()`/`.keys()`/`.values()` of those, and
    `enumerate`/`sorted`/`zip`/`reversed`/`list`/`tuple` over them."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and not any(isinstance(e, ast.Starred) for e in node.elts)
    if isinstance(node, ast.Dict):
        return bool(node.keys) and None not in node.keys
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (str, bytes)) and len(node.value) > 0
    if isinstance(node, ast.Name) and node.id in constants:
        return _surely_not_empty(constants[node.id], {})
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id == "range":
            return (
                len(node.args) == 1
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, int)
                and node.args[0].value > 0
            )
        if node.func.id in ("enumerate", "sorted", "zip", "reversed", "list", "tuple"):
            return bool(node.args) and all(_surely_not_empty(a, constants) for a in node.args)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("items", "keys", "values")
    ):
        return _surely_not_empty(node.func.value, constants)
    return False


def _checks_only_in_loops(path: Path) -> list[str]:
    """Test functions that assert, but only inside for-loops that may run zero times: with an
    empty iterable such a test passes without checking anything. A check is an `assert`, or a
    call of `pytest.raises`/`pytest.fail`/`pytest.warns`, of a function named `assert*`, or of a
    helper of the same module that asserts."""
    tree = _parse(path)
    constants: dict[str, ast.expr] = {}
    helpers: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            constants[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            constants[node.target.id] = node.value
        elif isinstance(node, ast.FunctionDef) and any(isinstance(n, ast.Assert) for n in ast.walk(node)):
            helpers.add(node.name)

    def is_check(node: ast.AST) -> bool:
        if isinstance(node, ast.Assert):
            return True
        if not isinstance(node, ast.Call):
            return False
        name = getattr(node.func, "attr", getattr(node.func, "id", ""))
        return name.startswith("assert") or name in ("raises", "fail", "warns") or name in helpers

    def checks(node: ast.AST, surely_runs: bool) -> list[bool]:
        """For every check in `node`: whether it surely runs (outside loops that may be empty)."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return []  # runs when called, if ever
        found = [surely_runs] if is_check(node) else []
        if isinstance(node, (ast.For, ast.AsyncFor)):
            body_runs = surely_runs and _surely_not_empty(node.iter, constants)
            found += checks(node.iter, surely_runs)
            found += [f for stmt in node.body for f in checks(stmt, body_runs)]
            return found + [f for stmt in node.orelse for f in checks(stmt, surely_runs)]
        return found + [f for child in ast.iter_child_nodes(node) for f in checks(child, surely_runs)]

    flagged = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
            found = [f for stmt in node.body for f in checks(stmt, True)]
            if found and not any(found):
                flagged.append(f"{path.name}:{node.lineno} {node.name}")
    return flagged


def test_no_test_checks_only_inside_a_loop_that_may_be_empty() -> None:
    flagged = [name for path in TEST_MODULES for name in _checks_only_in_loops(path)]
    assert not flagged, "assert the loop ran (its iterable is not empty) before it: " + ", ".join(flagged)


def test_the_loop_check_flags_a_test_that_cannot_fail(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(
        "ROWS = (1, 2)\n"
        "def _ok(x):\n    assert x\n"
        "def test_vacuous(rows):\n    for r in rows:\n        assert r > 0\n"
        "def test_nested(rows):\n    for r in ROWS:\n        for s in rows:\n            assert s\n"
        "def test_literal():\n    for r in ROWS:\n        assert r > 0\n"
        "def test_guarded(rows):\n    assert rows\n    for r in rows:\n        assert r > 0\n"
        "def test_helper(rows):\n    _ok(rows)\n    for r in rows:\n        assert r\n"
        "def test_no_assert():\n    print(1)\n"
    )
    assert _checks_only_in_loops(tmp_path / "test_sample.py") == [
        "test_sample.py:4 test_vacuous",
        "test_sample.py:7 test_nested",
    ]


def test_an_empty_parametrisation_fails_the_collection(tmp_path: Path) -> None:
    """tests/conftest.py turns pytest's silent skip of an empty parameter set into an error."""
    (tmp_path / "test_empty.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('x', [])\ndef test_nothing(x):\n    assert x\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "--collect-only", "-q", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout
    assert "empty parameter set" in proc.stdout + proc.stderr and "test_nothing" in proc.stdout + proc.stderr
