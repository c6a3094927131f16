"""The demo installs the project without extras (scripts/setup.sh --demo): every third-party
module that `bridge` and `mcp_server` import at module level must come from a declared runtime
dependency, not from a test extra that happened to pull it in (httpx came only with the extras
when the model gateway landed, and `rgbridge` did not start in the demo's environment)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions, requires
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in tree.body:  # module level only: function-level imports are the optional extras'
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def _declared_closure(names: list[str]) -> set[str]:
    """The declared dependencies and everything they require in turn (installed metadata)."""
    seen: set[str] = set()
    todo = [_norm(re.split(r"[<>=!~;\[ ]", n, maxsplit=1)[0]) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = requires(name) or []
        except Exception:
            continue
        for req in reqs:
            if "extra ==" in req:
                continue
            todo.append(_norm(re.split(r"[<>=!~;\[ (]", req, maxsplit=1)[0]))
    return seen


def test_every_module_level_import_is_a_runtime_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    closure = _declared_closure(project["dependencies"])
    dists = packages_distributions()
    ours = {"bridge", "mcp_server", "rgbridge_tasks", "tests"}
    missing: dict[str, set[str]] = {}
    for root in ("bridge", "mcp_server"):
        for path in sorted((REPO / root).rglob("*.py")):
            # the driver runs under a framework's own Python, the assets in the scoring containers
            if path.name == "library_driver.py" or "assets" in path.parts:
                continue
            for mod in _module_level_imports(path):
                if mod in ours or mod in sys.stdlib_module_names or mod == "__future__":
                    continue
                names = {_norm(d) for d in dists.get(mod, [mod])}
                if not names & closure:
                    missing.setdefault(mod, set()).add(str(path.relative_to(REPO)))
    assert not missing, f"imported at module level but not a runtime dependency: {missing}"
