"""Strict grading from structured test output, never from log text.

The source of truth is the JSON report of our pytest plugin (assets/rgbridge_pytest_report.py:
collected node ids, each item's setup/call/teardown outcome); JUnit XML is kept as a
cross-check. Rules (SPEC §6, strict profile; docs/strict-rules.md):
* the denominator is the set of items collected from the golden suite itself (the plugin's
  record of a `--collect-only` run in the tester), not what the run reports;
* a collected item missing from the report is `not_run`; skipped, error and not_run items are
  not passed;
* report entries whose nodeid is not in the collected set are ignored, so extra or forged
  entries cannot inflate the score.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import ScoringError
from bridge.scoring.result import PassAt1, TestCaseResult, TestOutcome

#: JUnit files larger than this are refused (a golden suite's report is kilobytes).
MAX_JUNIT_BYTES = 20 * 1024 * 1024
MAX_MESSAGE_CHARS = 2000

# Worst outcome wins when one nodeid appears several times (e.g. call failure + teardown error).
_SEVERITY = {"passed": 0, "skipped": 1, "not_run": 2, "failed": 3, "error": 4}
_DANGEROUS_XML = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)


class JUnitError(ScoringError):
    """A JUnit XML report is unsafe or unreadable."""


def normalize_nodeid(nodeid: str) -> str:
    """Canonical form of a pytest nodeid: forward slashes, no leading './'."""
    nodeid = nodeid.strip().replace("\\", "/")
    while nodeid.startswith("./"):
        nodeid = nodeid[2:]
    return nodeid


def _candidates(classname: str, name: str) -> list[str]:
    """Every nodeid a dotted junit classname + name could stand for, longest module first."""
    parts = [p for p in classname.split(".") if p]
    out: list[str] = []
    for k in range(len(parts), 0, -1):
        module = "/".join(parts[:k]) + ".py"
        out.append("::".join([module, *parts[k:], name]))
    return out


def nodeid_from_junit(
    classname: str,
    name: str,
    file: str | None = None,
    known: Iterable[str] | None = None,
) -> str:
    """Map a junit `<testcase classname= name= [file=]>` back to a pytest nodeid.

    pytest writes classname as the nodeid's path with '/' -> '.' and '.py' dropped, followed by
    the class chain (`tests/test_x.py::TestC::test_y` -> `tests.test_x.TestC` / `test_y`);
    parametrize ids stay in `name` (`test_y[1]`). The split between module and classes is
    ambiguous from the dotted form alone, so:
    1. with `file` (junit_family=xunit1), the module is the file and the rest are classes;
    2. else a candidate present in `known` (the collected nodeids) wins;
    3. else the module ends at the last dotted part that does not start with an uppercase
       letter (classes are capitalised by pytest's default `Test*` convention).
    """
    classname = classname.strip()
    if file:
        module = normalize_nodeid(file)
        dotted = module[:-3].replace("/", ".") if module.endswith(".py") else module.replace("/", ".")
        rest = classname[len(dotted) :].lstrip(".") if classname.startswith(dotted) else ""
        return "::".join([module, *[p for p in rest.split(".") if p], name])
    if not classname:
        return name
    candidates = _candidates(classname, name)
    if known is not None:
        known_set = known if isinstance(known, (set, frozenset)) else set(known)
        for cand in candidates:
            if cand in known_set:
                return cand
    parts = [p for p in classname.split(".") if p]
    k = len(parts)
    while k > 1 and parts[k - 1][:1].isupper():
        k -= 1
    return candidates[len(parts) - k]


def safe_root(xml_bytes: bytes) -> ET.Element:
    if len(xml_bytes) > MAX_JUNIT_BYTES:
        raise JUnitError(f"JUnit report too large ({len(xml_bytes)} bytes)")
    if _DANGEROUS_XML.search(xml_bytes):
        raise JUnitError("JUnit report contains a DOCTYPE or ENTITY declaration; refused")
    try:
        return ET.fromstring(xml_bytes)
    except ET.ParseError as exc:
        raise JUnitError(f"JUnit report is not well-formed XML: {exc}") from None


def parse_junit_xml(xml_bytes: bytes | str, known_nodeids: Iterable[str] | None = None) -> list[TestCaseResult]:
    """All `<testcase>` elements of a JUnit report (root `<testsuites>` or `<testsuite>`).

    Outcome: an `<error>` child -> error, `<failure>` -> failed, `<skipped>` (also pytest's
    xfail) -> skipped, none -> passed. Pass `known_nodeids` to resolve ambiguous classnames.
    """
    if isinstance(xml_bytes, str):
        xml_bytes = xml_bytes.encode("utf-8")
    root = safe_root(xml_bytes)
    known = set(known_nodeids) if known_nodeids is not None else None
    results: list[TestCaseResult] = []
    for case in root.iter("testcase"):
        nodeid = nodeid_from_junit(case.get("classname", ""), case.get("name", ""), case.get("file"), known)
        outcome: TestOutcome = "passed"
        message = ""
        kinds: tuple[tuple[str, TestOutcome], ...] = (("error", "error"), ("failure", "failed"), ("skipped", "skipped"))
        for tag, kind in kinds:
            child = case.find(tag)
            if child is not None:
                outcome = kind
                message = child.get("message") or (child.text or "")
                break
        try:
            duration = float(case.get("time", "0") or 0)
        except ValueError:
            duration = 0.0
        results.append(
            TestCaseResult(nodeid=nodeid, outcome=outcome, duration=duration, message=message[:MAX_MESSAGE_CHARS])
        )
    return results


@dataclass
class PluginReport:
    """What the plugin wrote (see its docstring for the JSON shape)."""

    collected: list[str] = field(default_factory=list)
    collect_errors: list[dict[str, str]] = field(default_factory=list)
    tests: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    exitstatus: int | None = None
    exit_reason: str | None = None
    deadline_hit: bool = False
    finished: bool = False


#: the stop reason the plugin gives pytest at the suite deadline (assets/rgbridge_pytest_report.py)
DEADLINE_STOP_REASON = "rgbridge: suite deadline reached"


def session_notes(report: PluginReport, budget: int) -> list[str]:
    """Why a run stopped before its last item: the suite's own `pytest.exit()`, or strict's suite
    deadline. pytest reports the deadline stop as an interruption too (`Interrupted: ...`), so
    that one is not blamed on the suite (docs/strict-rules.md, time bounds)."""
    notes: list[str] = []
    reason = report.exit_reason
    if reason and not (report.deadline_hit and DEADLINE_STOP_REASON in reason):
        notes.append(f"the suite ended the session early ({reason}); items not run count as not passed")
    if report.deadline_hit:
        notes.append(f"suite deadline ({budget}s) reached; items not started count as not passed")
    return notes


def parse_plugin_report(raw: bytes | str | None) -> PluginReport | None:
    """The plugin's JSON report, validated field by field; None when absent or unreadable."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("version") != 1:
        return None
    collected = [normalize_nodeid(n) for n in data.get("collected") or [] if isinstance(n, str)]
    errors = [
        {"nodeid": str(e.get("nodeid", "")), "message": str(e.get("message", ""))[:MAX_MESSAGE_CHARS]}
        for e in data.get("collect_errors") or []
        if isinstance(e, dict)
    ]
    tests: dict[str, dict[str, dict[str, Any]]] = {}
    for nodeid, phases in (data.get("tests") or {}).items():
        if isinstance(nodeid, str) and isinstance(phases, dict):
            tests[normalize_nodeid(nodeid)] = {
                w: p for w, p in phases.items() if w in ("setup", "call", "teardown") and isinstance(p, dict)
            }
    status = data.get("exitstatus")
    reason = data.get("exit_reason")
    return PluginReport(
        collected=list(dict.fromkeys(collected)),
        collect_errors=errors,
        tests=tests,
        exitstatus=status if isinstance(status, int) else None,
        exit_reason=str(reason)[:MAX_MESSAGE_CHARS] if reason else None,
        deadline_hit=bool(data.get("deadline_hit")),
        finished=bool(data.get("finished")),
    )


def item_outcome(phases: dict[str, dict[str, Any]]) -> tuple[str, str, float]:
    """(outcome, message, duration) of one item from its setup/call/teardown reports.

    setup failed -> error; setup skipped -> skipped; call passed (an xpass included) -> passed;
    call failed -> failed; call skipped (skip or xfail) -> skipped; a failing teardown turns
    anything better into error; no call report after a passed setup -> not_run (interrupted).
    """
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    duration = sum(float(p.get("duration", 0) or 0) for p in phases.values())
    if setup is None:
        return "not_run", "", duration
    if setup.get("outcome") == "failed":
        return "error", str(setup.get("message", "")), duration
    if setup.get("outcome") == "skipped":
        outcome, message = "skipped", str(setup.get("message", ""))
    elif call is None:
        outcome, message = "not_run", ""
    elif call.get("outcome") == "passed":
        outcome, message = "passed", ""
    elif call.get("outcome") == "failed":
        outcome, message = "failed", str(call.get("message", ""))
    else:
        outcome, message = "skipped", str(call.get("message", ""))
    if teardown is not None and teardown.get("outcome") == "failed" and _SEVERITY[outcome] < _SEVERITY["error"]:
        outcome, message = "error", str(teardown.get("message", ""))
    return outcome, message, duration


def item_phase(phases: dict[str, dict[str, Any]], outcome: str) -> str:
    """The phase that decided `item_outcome`'s verdict: a failing teardown, else a setup that did
    not pass, else the call ("" for an item that never ran)."""
    if outcome == "not_run":
        return ""
    teardown, setup = phases.get("teardown") or {}, phases.get("setup") or {}
    if outcome == "error" and teardown.get("outcome") == "failed" and setup.get("outcome") != "failed":
        return "teardown"
    if setup.get("outcome") in ("failed", "skipped"):
        return "setup"
    return "call"


def results_from_plugin(report: PluginReport) -> list[TestCaseResult]:
    """One TestCaseResult per item the plugin saw run."""
    out = []
    for nodeid, phases in report.tests.items():
        outcome, message, duration = item_outcome(phases)
        out.append(
            TestCaseResult(
                nodeid=nodeid,
                outcome=outcome,
                duration=round(duration, 3),
                message=message[:MAX_MESSAGE_CHARS],
                phase=item_phase(phases, outcome),
            )
        )
    return out


def junit_disagreements(primary: Iterable[TestCaseResult], junit: Iterable[TestCaseResult]) -> list[str]:
    """Node ids whose passed/not-passed verdict differs between the plugin and JUnit XML."""
    a = {r.nodeid: r.outcome == "passed" for r in primary}
    b: dict[str, bool] = {}
    for r in junit:
        b[r.nodeid] = b.get(r.nodeid, True) and r.outcome == "passed"
    return sorted(n for n in a.keys() & b.keys() if a[n] != b[n])


def parse_collect_only(text: str) -> list[str]:
    """Nodeids from `pytest --collect-only -q` output, in order, without duplicates."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        if not line or line[0].isspace() or "::" not in line:
            continue
        if re.match(r"(ERROR|FAILED|WARNING|PASSED|SKIPPED)\b", line):
            continue
        seen.setdefault(normalize_nodeid(line), None)
    return list(seen)


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
        if prev is None or _SEVERITY[r.outcome] > _SEVERITY[prev.outcome]:
            by_id[nid] = r.model_copy(update={"nodeid": nid})
    return [by_id.get(nid) or TestCaseResult(nodeid=nid, outcome="not_run") for nid in order]


def strict_pass_at_1(collected_nodeids: Iterable[str], results: Iterable[TestCaseResult]) -> PassAt1:
    """Strict Pass@1: passed collected items / collected items."""
    merged = merge_results(collected_nodeids, results)
    counts = {k: 0 for k in _SEVERITY}
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
