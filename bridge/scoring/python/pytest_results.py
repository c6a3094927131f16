"""Python strict's test output read back, never from log text: the JSON report of our pytest
plugin (assets/rgbridge_pytest_report.py: collected node ids, each item's setup/call/teardown
outcome), JUnit XML kept as a cross-check, and `--collect-only` output.

The verdicts over the golden items (denominator, worst outcome, forged entries dropped) are the
shared rules of bridge/scoring/grading.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bridge.scoring.grading import MAX_MESSAGE_CHARS, SEVERITY, junit_case, normalize_nodeid, safe_root
from bridge.scoring.result import TestCaseResult


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
        results.append(junit_case(case, nodeid))
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
    if teardown is not None and teardown.get("outcome") == "failed" and SEVERITY[outcome] < SEVERITY["error"]:
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
