"""Facts about a golden pytest suite read from its files (never by running it on the host).

* `pinned_ini_options`: the options strict passes to pytest so the suite's own ini keeps its
  meaning (markers, timeout, pythonpath, its own plugins) while the options strict owns
  (reports, parallelism, coverage, stop-early, caching, config location) are neutralised;
* `static_test_ids`: test ids read from the source with `ast`, for modules pytest could not
  collect (their items still count against the repo) and for white-box suites;
* `detect_quirks`: the labels `rgbridge conformance` prints (docs/strict-rules.md).
"""

from __future__ import annotations

import ast
import configparser
import re
import shlex
import threading
from collections.abc import Sequence
from pathlib import Path

#: CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state, so two
#: threads parsing at once (a thread switch inside ast2obj, e.g. from a finaliser during garbage
#: collection) can fail with "SystemError: AST constructor recursion depth mismatch"
#: (python/cpython#106905). Scoring workers run in threads: every parse takes this lock.
_PARSE_LOCK = threading.Lock()
#: The lock cannot hold parses made outside the bridge: 3.11's traceback module parses each
#: printed line for its carets (`^^^`), so any thread printing a traceback (a server's request
#: handler, say) is such a parse. The mismatch leaves nothing behind, so the parse is tried again.
_RACE_TRIES = 5
_RACE = "recursion depth mismatch"


def parse_python(source: str) -> ast.Module | None:
    """The module's syntax tree, or None when the text is not parsable Python (syntax errors, NUL
    bytes, nesting too deep for the parser): golden files are read, never trusted to parse."""
    for tries_left in range(_RACE_TRIES - 1, -1, -1):
        with _PARSE_LOCK:
            try:
                return ast.parse(source)
            except SystemError as exc:
                if _RACE not in str(exc) or not tries_left:
                    raise
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return None
    raise AssertionError("unreachable")  # the last try returns or raises


#: options strict owns, dropped from the suite's addopts with their value
_DROP_WITH_VALUE = {
    "-n",
    "--numprocesses",
    "--dist",
    "--maxprocesses",
    "--tx",
    "--html",
    "--css",
    "--cov-report",
    "--cov-fail-under",
    "--cov-config",
    "--junitxml",
    "--junit-xml",
    "--junit-prefix",
    "--json-report-file",
    "--maxfail",
    "-c",
    "--config-file",
    "--rootdir",
    "--confcutdir",
    "--result-log",
    "--report-log",
}
#: flags strict owns, dropped from the suite's addopts
_DROP_FLAGS = {
    "--self-contained-html",
    "--no-cov",
    "--no-cov-on-fail",
    "--cov-append",
    "--cov-branch",
    "--lf",
    "--last-failed",
    "--ff",
    "--failed-first",
    "--nf",
    "--new-first",
    "--sw",
    "--stepwise",
    "--sw-skip",
    "--stepwise-skip",
    "--cache-clear",
    "-x",
    "--exitfirst",
    "--json-report",
    "--looponfail",
    "-f",
    "--pdb",
    "--trace",
}
#: --cov takes an optional value
_OPTIONAL_VALUE = {"--cov"}
#: the per-test bound strict adds when the suite declares none (pytest-timeout, tester pin)
DEFAULT_PER_TEST_TIMEOUT = 60
#: top-level modules an agent's service typically provides: importing one from a golden test
#: that does not ship it makes the suite white-box
_AGENT_MODULES = {"app", "main", "server", "api", "application", "src", "service", "run", "wsgi", "manage"}


def read_ini_section(ini_path: Path) -> dict[str, str] | None:
    """The `[pytest]` section of an ini file as pytest reads it, or None when pytest ignores
    the file's content (a `pytest.ini` whose only header is `[tool:pytest]`)."""
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(ini_path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, configparser.Error):
        return None
    if not parser.has_section("pytest"):
        return None
    return {k: v for k, v in parser.items("pytest")}


def filter_addopts(addopts: str) -> tuple[list[str], list[str]]:
    """(kept, dropped) tokens of an addopts value; see the module docstring."""
    try:
        tokens = shlex.split(addopts)
    except ValueError:
        return [], [addopts]
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        name = tok.split("=", 1)[0]
        if name in _DROP_WITH_VALUE:
            if "=" in tok or (tok.startswith("-n") and tok != "-n") or i + 1 >= len(tokens):
                dropped.append(tok)
            else:
                dropped.extend(tokens[i : i + 2])
                i += 1
        elif re.match(r"^-n\S+$", tok) or re.match(r"^--maxfail\S*$", tok):
            dropped.append(tok)
        elif name in _OPTIONAL_VALUE or name.startswith("--cov"):
            dropped.append(tok)
            if "=" not in tok and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                dropped.append(tokens[i + 1])
                i += 1
        elif tok in _DROP_FLAGS:
            dropped.append(tok)
        else:
            kept.append(tok)
        i += 1
    return kept, dropped


def pinned_ini_options(ini_path: Path | None, *, per_test_timeout: int = DEFAULT_PER_TEST_TIMEOUT) -> list[str]:
    """`-o` overrides for the tester's pytest command line (docs/strict-rules.md §addopts)."""
    section = read_ini_section(ini_path) if ini_path is not None else None
    section = section or {}
    kept, _ = filter_addopts(section.get("addopts", ""))
    opts = ["-o", f"addopts={shlex.join(kept)}"]
    declares_timeout = "timeout" in section or any(t.startswith("--timeout") for t in kept)
    if not declares_timeout:
        opts += ["-o", f"timeout={per_test_timeout}"]
    return opts


# ----------------------------------------------------------------------------- static ids


def _collectable_class(node: ast.ClassDef) -> bool:
    if not node.name.startswith("Test"):
        return False
    return not any(isinstance(b, ast.FunctionDef) and b.name == "__init__" for b in node.body)


def static_test_ids(tests_dir: Path, prefix: str = "tests") -> dict[str, list[str]]:
    """module nodeid -> test ids pytest's default rules would give (`test_*.py`/`*_test.py`,
    `test*` functions, `Test*` classes without `__init__`), read with `ast`. Parametrized tests
    count once here; modules that do not parse give an empty list."""
    out: dict[str, list[str]] = {}
    files = sorted({*tests_dir.rglob("test_*.py"), *tests_dir.rglob("*_test.py")})
    for path in files:
        if "__pycache__" in path.parts:
            continue
        module = f"{prefix}/{path.relative_to(tests_dir).as_posix()}"
        ids: list[str] = []
        try:
            tree = parse_python(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            tree = None
        if tree is None:
            out[module] = ids
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                ids.append(f"{module}::{node.name}")
            elif isinstance(node, ast.ClassDef) and _collectable_class(node):
                ids += [
                    f"{module}::{node.name}::{m.name}"
                    for m in node.body
                    if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("test")
                ]
        out[module] = ids
    return out


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _py_sources(tests_dir: Path) -> list[tuple[Path, str]]:
    out = []
    for path in sorted(tests_dir.rglob("*.py")):
        if "__pycache__" not in path.parts:
            try:
                out.append((path, path.read_text(encoding="utf-8", errors="replace")))
            except OSError:
                continue
    return out


def agent_imports(tests_dir: Path) -> list[str]:
    """Agent-side top-level modules the golden files import but do not ship (white-box)."""
    shipped = {p.stem for p in tests_dir.rglob("*.py")} | {p.name for p in tests_dir.rglob("*") if p.is_dir()}
    found: set[str] = set()
    for _, text in _py_sources(tests_dir):
        tree = parse_python(text)
        if tree is not None:
            found |= _imports(tree)
    return sorted((found & _AGENT_MODULES) - shipped)


def optional_imports(tests_dir: Path) -> list[str]:
    """Top-level modules the golden files import inside `try:` and set to None when missing
    (synapse: `try: import jsonschema` / `except ...: jsonschema = None`, then
    `skipif(jsonschema is None)`): without the package the tests skip instead of failing."""
    found: set[str] = set()
    for _, text in _py_sources(tests_dir):
        tree = parse_python(text)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Try):
                continue
            bound = {
                alias.asname or alias.name.split(".")[0]: alias.name.split(".")[0]
                for stmt in node.body
                if isinstance(stmt, ast.Import)
                for alias in stmt.names
            }
            for handler in node.handlers:
                for stmt in handler.body:
                    if (
                        isinstance(stmt, ast.Assign)
                        and isinstance(stmt.value, ast.Constant)
                        and stmt.value.value is None
                    ):
                        found |= {bound[t.id] for t in stmt.targets if isinstance(t, ast.Name) and t.id in bound}
    return sorted(found)


def _declares(requirements: str, module: str) -> bool:
    name = re.escape(module.lower()).replace("_", "[-_]")
    return re.search(rf"^\s*{name}\s*(?:[<>=!~;\[#]|$)", requirements.lower(), re.MULTILINE) is not None


def detect_quirks(
    tests_dir: Path, extras: dict[str, Path] | None = None, *, port: int | None = None, provided: Sequence[str] = ()
) -> list[str]:
    """Short labels for what a suite does that a grader must handle (conformance table)."""
    extras = extras or {}
    quirks: list[str] = []
    ini = tests_dir / "pytest.ini"
    if ini.is_file():
        section = read_ini_section(ini)
        if section is None:
            quirks.append("ini[tool:pytest]-ignored")
        else:
            kept, dropped = filter_addopts(section.get("addopts", ""))
            flags = [t for t in kept + dropped if t.startswith("-")]
            if flags:
                quirks.append("addopts:" + ",".join(dict.fromkeys(flags)))
            if "markers" in section:
                quirks.append("markers")
            if "timeout" in section:
                quirks.append(f"timeout={section['timeout'].strip()}")
    if "pytest.ini" in extras:
        quirks.append("root-pytest.ini")
    reqs = ""
    for path in (tests_dir / "requirements.txt", extras.get("requirements.txt")):
        if path is not None and path.is_file():
            reqs += path.read_text(encoding="utf-8", errors="replace").lower()
    plugins = sorted(set(re.findall(r"^\s*(pytest-[a-z0-9_-]+)", reqs, re.MULTILINE)))
    if plugins:
        quirks.append("plugins:" + ",".join(p.removeprefix("pytest-") for p in plugins))
    # The tester installs only its pins (`provided`, from scoring) and what the task declares
    # (docs/strict-rules.md): an optional import of anything else makes its tests skip.
    available = "\n".join(pin.split("==")[0] for pin in provided) + "\n" + reqs
    missing = [m for m in optional_imports(tests_dir) if not _declares(available, m)]
    if missing:
        quirks.append("optional-import:" + ",".join(missing))
    sources = _py_sources(tests_dir)
    text = "\n".join(t for _, t in sources)
    if "pytest.exit(" in text:
        quirks.append("pytest.exit")
    if re.search(r"autouse\s*=\s*True", text) and "pytest.skip(" in text:
        quirks.append("autouse-skip")
    elif "pytest.skip(" in text:
        quirks.append("skips")
    if re.search(r"\b(404|409)\b[^\n]*\n?[^\n]*pytest\.skip\(", text):
        quirks.append("skip-on-404/409")
    if (
        re.search(r"\b\w*(retries|retry|attempts|wait|timeout)\w*\s*=\s*30\b|range\(\s*30\s*\)", text)
        and "sleep(" in text
    ):
        quirks.append("polls-30s")
    white = agent_imports(tests_dir)
    if white:
        quirks.append("white-box:" + ",".join(white))
    if not re.search(r"\b(requests|httpx|urllib|http\.client|aiohttp)\b", text):
        quirks.append("no-service")
    static = static_test_ids(tests_dir)
    if not any(static.values()):
        quirks.append("no-collectable-tests")
    for _, src in sources:
        tree = parse_python(src)
        if tree is None:
            continue
        if any(
            isinstance(n, ast.ClassDef)
            and not _collectable_class(n)
            and any(isinstance(m, ast.FunctionDef) and m.name.startswith("test") for m in n.body)
            for n in tree.body
        ):
            quirks.append("runner-class")
            break
    if "SERVICE_BASE_URL" in text:
        quirks.append("url:SERVICE_BASE_URL")
    if "API_BASE_URL" in text:
        quirks.append("url:API_BASE_URL")
    if re.search(r"(localhost|127\.0\.0\.1):\d+", text) and not re.search(r"environ|getenv", text):
        quirks.append("url:hard-coded")
    return list(dict.fromkeys(quirks))
