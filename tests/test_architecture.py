"""The import graph matches docs/architecture.md: no cycles (function-level imports included),
and imports only point down the layers, so a newcomer can read the flow from `ls`."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# Lower layers never import higher ones. Data flows tasks → sessions → recording → scoring →
# reports; the code that performs a step imports the layers it hands work to, so the import
# order is: utilities < tasks < scoring < recording < sessions < reports < agents < adapters.
LAYERS: list[tuple[str, ...]] = [
    ("bridge", "bridge.errors", "bridge.textsafe", "bridge.locations", "bridge.fs"),
    ("bridge.tasks",),
    ("bridge.scoring",),
    ("bridge.recording",),
    ("bridge.sessions",),
    ("bridge.reports",),
    ("bridge.agents",),
    ("bridge.commands", "bridge.cli"),
    ("mcp_server",),
]
MAX_LINES = 450  # "about 400": the formatter's line breaks vary
LONG_MODULE_NOTE = "Why this module is long:"
# Modules still waiting for their split (issue 10); this list only shrinks.
PENDING_SPLIT = {}


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
        tree = ast.parse(path.read_text(), str(path))
        # Imports under `if TYPE_CHECKING:` are for annotations only: they never run.
        type_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If)
            and getattr(block.test, "id", getattr(block.test, "attr", "")) == "TYPE_CHECKING"
            for stmt in block.body
            for n in ast.walk(stmt)
        }
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
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


def test_pending_split_list_only_names_long_modules() -> None:
    modules = _modules()
    stale = [
        name
        for name in PENDING_SPLIT
        if name not in modules or len(modules[name].read_text().splitlines()) <= MAX_LINES
    ]
    assert not stale, f"split or gone, remove from PENDING_SPLIT: {stale}"


def test_long_modules_say_why() -> None:
    long = [
        f"{name} ({n} lines)"
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
        and name not in PENDING_SPLIT
        and LONG_MODULE_NOTE not in (ast.get_docstring(ast.parse(path.read_text())) or "")
    ]
    assert not long, f"modules over {MAX_LINES} lines without '{LONG_MODULE_NOTE}' in their docstring: {long}"


def test_architecture_doc_lists_every_module() -> None:
    doc = (REPO_ROOT / "docs" / "architecture.md").read_text()
    missing = [
        str(path.relative_to(REPO_ROOT))
        for path in _modules().values()
        if f"`{path.relative_to(REPO_ROOT).as_posix()}`" not in doc
    ]
    assert not missing, f"docs/architecture.md does not list: {missing}"


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
    tree = ast.parse(path.read_text(), str(path))
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
    for name in ("coverage", "deploy", "failures", "grading", "plan", "result", "types", "upstream")
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
