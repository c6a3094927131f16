"""Strict grading both languages share: one verdict per golden item, never from log text.

Rules (SPEC §6, strict profile; docs/strict-rules.md):
* the denominator is the set of golden items (Python: collected from the golden suite itself;
  Java: counted from its sources), not what the run reports;
* a golden item missing from the results is `not_run`; skipped, error and not_run items are
  not passed;
* results whose id is not a golden item are ignored, so extra or forged entries cannot inflate
  the score.

Reading each language's test output is its wing's: bridge/scoring/python/pytest_results.py,
bridge/scoring/java/surefire.py (both refuse unsafe XML through `safe_root`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable

from bridge.errors import ScoringError
from bridge.scoring.result import PassAt1, TestCaseResult, TestOutcome

#: JUnit files larger than this are refused (a golden suite's report is kilobytes).
MAX_JUNIT_BYTES = 20 * 1024 * 1024
MAX_MESSAGE_CHARS = 2000

# Worst outcome wins when one nodeid appears several times (e.g. call failure + teardown error).
SEVERITY = {"passed": 0, "skipped": 1, "not_run": 2, "failed": 3, "error": 4}
_DANGEROUS_XML = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)


class JUnitError(ScoringError):
    """A JUnit XML report is unsafe or unreadable."""


def normalize_nodeid(nodeid: str) -> str:
    """Canonical form of a pytest nodeid: forward slashes, no leading './'."""
    nodeid = nodeid.strip().replace("\\", "/")
    while nodeid.startswith("./"):
        nodeid = nodeid[2:]
    return nodeid


def safe_root(xml_bytes: bytes) -> ET.Element:
    """The root of a test report, refused when too large, not well-formed or declaring entities."""
    if len(xml_bytes) > MAX_JUNIT_BYTES:
        raise JUnitError(f"JUnit report too large ({len(xml_bytes)} bytes)")
    if _DANGEROUS_XML.search(xml_bytes):
        raise JUnitError("JUnit report contains a DOCTYPE or ENTITY declaration; refused")
    try:
        return ET.fromstring(xml_bytes)
    except ET.ParseError as exc:
        raise JUnitError(f"JUnit report is not well-formed XML: {exc}") from None


#: a `<testcase>`'s child element and the outcome it means, in the order they are looked for
_JUNIT_OUTCOMES: tuple[tuple[str, TestOutcome], ...] = (
    ("error", "error"),
    ("failure", "failed"),
    ("skipped", "skipped"),
)


def junit_case(case: ET.Element, nodeid: str) -> TestCaseResult:
    """One `<testcase>` of a JUnit report (pytest's or Surefire's) under ``nodeid``: an `<error>`
    child -> error, `<failure>` -> failed, `<skipped>` -> skipped, none -> passed; its message
    capped, an unreadable time read as 0."""
    outcome: TestOutcome = "passed"
    message = ""
    for tag, kind in _JUNIT_OUTCOMES:
        child = case.find(tag)
        if child is not None:
            outcome, message = kind, child.get("message") or (child.text or "")
            break
    try:
        duration = float(case.get("time", "0") or 0)
    except ValueError:
        duration = 0.0
    return TestCaseResult(nodeid=nodeid, outcome=outcome, duration=duration, message=message[:MAX_MESSAGE_CHARS])


def merge_results(collected_nodeids: Iterable[str], results: Iterable[TestCaseResult]) -> list[TestCaseResult]:
    """One result per collected item, in collection order.

    Items absent from `results` become `not_run`; duplicates keep the worst outcome; results
    for nodeids outside the collected set are dropped.
    """
    order = list(dict.fromkeys(normalize_nodeid(n) for n in collected_nodeids))
    wanted = set(order)
    by_id: dict[str, TestCaseResult] = {}
    for r in results:
        nid = normalize_nodeid(r.nodeid)
        if nid not in wanted:
            continue
        prev = by_id.get(nid)
        if prev is None or SEVERITY[r.outcome] > SEVERITY[prev.outcome]:
            by_id[nid] = r.model_copy(update={"nodeid": nid})
    return [by_id.get(nid) or TestCaseResult(nodeid=nid, outcome="not_run") for nid in order]


def strict_pass_at_1(collected_nodeids: Iterable[str], results: Iterable[TestCaseResult]) -> PassAt1:
    """Strict Pass@1: passed collected items / collected items."""
    merged = merge_results(collected_nodeids, results)
    counts = {k: 0 for k in SEVERITY}
    for r in merged:
        counts[r.outcome] += 1
    return PassAt1.from_counts(
        counts["passed"],
        counts["failed"],
        counts["error"],
        skipped=counts["skipped"],
        total=len(merged),
        not_run=counts["not_run"],
    )
