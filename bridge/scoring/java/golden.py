"""The golden Java suite's test methods, counted from its sources (strict's denominator).

Counting never depends on the agent's build: a golden class that does not compile still
contributes all its methods. A method is annotated with JUnit 5's ``@Test``,
``@ParameterizedTest``, ``@RepeatedTest``, ``@TestFactory`` or ``@TestTemplate`` (or JUnit 4's
``@Test``); each counts once, whatever number of invocations it has. Methods are attributed to
the top-level class of their file (its package + the file name); a ``@Nested`` class's methods
match that class's reports (``Outer$Inner``) too. Item ids are ``<package>.<Class>::<method>``.
"""

from __future__ import annotations

import re
from pathlib import Path

TEST_ANNOTATIONS = ("Test", "ParameterizedTest", "RepeatedTest", "TestFactory", "TestTemplate")
MAX_SOURCE_BYTES = 2_000_000

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_STRINGS = re.compile(r'"""[\s\S]*?"""|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')
_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)\s*;", re.MULTILINE)
_ANNOTATION = re.compile(
    r"@(?:org\.junit(?:\.jupiter\.api|\.jupiter\.params)?\.)?(" + "|".join(TEST_ANNOTATIONS) + r")\b"
)


def _strip(source: str) -> str:
    source = _COMMENTS.sub(" ", source)
    return _STRINGS.sub('""', source)


def _skip_parens(text: str, i: int) -> int:
    """Index after the balanced parenthesis group starting at `text[i] == "("`."""
    depth = 0
    while i < len(text):
        depth += text[i] == "("
        depth -= text[i] == ")"
        i += 1
        if depth == 0:
            break
    return i


_WORD = re.compile(r"\s*(@?)([A-Za-z_$][\w$.]*)")


def _method_after(text: str, i: int) -> str | None:
    """The method declared after an annotation ending at `i`: further annotations (with their
    arguments), modifiers and the return type are skipped up to the first `name(`; `{`, `;` or
    `=` first means the annotation was not on a method."""
    n = len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == "(":
            i = _skip_parens(text, i)
            continue
        if i < n and text[i] in "<>[],?":
            i += 1
            continue
        m = _WORD.match(text, i)
        if m is None:
            return None
        i = m.end()
        j = i
        while j < n and text[j].isspace():
            j += 1
        if m.group(1) == "@":
            if j < n and text[j] == "(":
                i = _skip_parens(text, j)
            continue
        if j < n and text[j] == "(":
            return m.group(2)
    return None


def scan_source(source: str, class_name: str) -> list[str]:
    """Item ids of the test methods in one Java source file."""
    text = _strip(source[:MAX_SOURCE_BYTES])
    pkg = _PACKAGE.search(text)
    qualified = f"{pkg.group(1)}.{class_name}" if pkg else class_name
    out: list[str] = []
    for m in _ANNOTATION.finditer(text):
        name = _method_after(text, m.end())
        if name and name not in ("class", "interface"):
            item = f"{qualified}::{name}"
            if item not in out:
                out.append(item)
    return out


def golden_items(tests_dir: Path) -> list[str]:
    """Every golden test method under a task's golden `src/test` tree, sorted by file."""
    items: list[str] = []
    for path in sorted(Path(tests_dir).rglob("*.java")):
        if path.is_file() and not path.is_symlink():
            source = path.read_text(encoding="utf-8", errors="replace")
            items.extend(i for i in scan_source(source, path.stem) if i not in items)
    return items
