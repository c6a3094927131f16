"""Surefire XML reports -> per-test results keyed like the golden items (`pkg.Class::method`).

Reports are untrusted (written in a container that runs agent code): size-capped, DOCTYPE and
ENTITY declarations refused (bridge.scoring.grading), and only golden items count. Invocation
suffixes are dropped from names (`m(String)[1]`, `m()`, `[2] m`), so a parameterized or repeated
method is one item whose worst invocation decides it; nested classes (`Outer$Inner`) map to their
top-level class.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from bridge.scoring.grading import JUnitError, junit_case, safe_root
from bridge.scoring.result import TestCaseResult

_INVOCATION = re.compile(r"^\[\d+\]\s*|\s*[\[(].*$")


def _method(name: str) -> str:
    return _INVOCATION.sub("", name.strip()).strip()


def parse_reports(reports: Iterable[bytes]) -> tuple[list[TestCaseResult], list[str]]:
    """(results, errors) over the `TEST-*.xml` contents; unreadable reports are listed."""
    results: list[TestCaseResult] = []
    errors: list[str] = []
    for data in reports:
        try:
            root = safe_root(data)
        except JUnitError as exc:
            errors.append(str(exc))
            continue
        for case in root.iter("testcase"):
            classname = case.get("classname", "").split("$", 1)[0]
            results.append(junit_case(case, f"{classname}::{_method(case.get('name', ''))}"))
    return results, errors
