"""Why a score is what it is: each golden test not passed with the one line that explains it,
and where static and dynamic API coverage disagree.

One extractor (`message_line`, `not_passed`, `ac_disagreement`) and one text renderer
(`explain_lines`, printed by `render_explanations`) serve every place a score is shown: `score`,
`evaluate`, `rescore`, `report`, get_result's summary, `rgbridge submit` and the human panel; the
HTML report builds its per-test table from the same rows. Inputs are plain dicts (a result's
`profiles` as JSON, or a report entry's `rgbridge.profiles`), so results read back from disk work
the same as fresh ones. Messages come from the agent's service and the suite's output: untrusted,
made terminal-safe here and printed as rich `Text` (never markup).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.textsafe import sanitize_terminal

#: failed tests a terminal or an agent is shown before "… and N more"
DEFAULT_CAP = 10
MAX_LINE_CHARS = 200

# worst first: what the reader should look at first
_ORDER = {"error": 0, "failed": 1, "not_run": 2, "skipped": 3}
# an exception summary line: `AssertionError: ...`, `requests.exceptions.ConnectionError: ...`
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Failed|Timeout|Interrupt)\b")
# traceback noise a reader does not need: `self = <...>`, source lines, `file.py:12: in test_x`
_NOISE = re.compile(r"^(self|cls|request|response|r|resp) = |^>|^\S+\.py:\d+|^_{3,}|^\s*[~^]+\s*$")


def _clip(text: str) -> str:
    text = sanitize_terminal(" ".join(text.split()))
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"


def message_line(message: str) -> str:
    """The one line of a test's failure text that says what went wrong.

    pytest marks its explanation with `E` (`E       assert 404 in [200, 204]`): the first such
    line that is the comparison wins (else the first `E` line), shown as `E assert 404 in [200, 204]`. Otherwise the last exception summary
    (`ConnectionError: ...`), else the first line that is not traceback noise (`self = <...>`,
    source lines), else the first line. JUnit/Surefire one-line messages come back as they are.
    """
    lines = [ln.rstrip() for ln in str(message or "").splitlines() if ln.strip()]
    if not lines:
        return ""
    explained = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    if explained:  # the comparison itself beats a custom message (`assert r.status_code == 400, r.text`)
        return _clip("E " + next((x for x in explained if x.startswith("assert ")), explained[0]))
    for ln in reversed(lines):
        if _EXCEPTION.match(ln.strip()) and ":" in ln:
            return _clip(ln)
    for ln in lines:
        if not _NOISE.match(ln.strip()):
            return _clip(ln)
    return _clip(lines[0])


@dataclass(frozen=True)
class CaseRow:
    """One golden test under one or more profiles: outcome, phase, duration, message line."""

    nodeid: str
    outcome: str
    line: str
    profiles: tuple[str, ...]
    phase: str = ""
    duration: float = 0.0


def _tests_of(prof: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    tests = prof.get("tests")
    return [t for t in tests if isinstance(t, Mapping)] if isinstance(tests, list) else []


def case_rows(prof: Mapping[str, Any]) -> list[CaseRow]:
    """Every test of one profile (passed too), in the suite's order, with its message line."""
    name = str(prof.get("profile") or "")
    rows = []
    for t in _tests_of(prof):
        try:
            duration = float(t.get("duration") or 0.0)
        except (TypeError, ValueError):
            duration = 0.0
        outcome = str(t.get("outcome") or "")
        rows.append(
            CaseRow(
                nodeid=sanitize_terminal(str(t.get("nodeid") or "?")),
                outcome=sanitize_terminal(outcome),
                line=message_line(str(t.get("message") or "")) or ("not run" if outcome == "not_run" else ""),
                profiles=(name,) if name else (),
                phase=sanitize_terminal(str(t.get("phase") or "")),
                duration=duration,
            )
        )
    return rows


def not_passed(profiles: Mapping[str, Mapping[str, Any]]) -> list[CaseRow]:
    """The tests not passed under any profile, worst outcome first; a test failing the same way
    under both profiles is one row naming both."""
    merged: dict[str, CaseRow] = {}
    for name in sorted(profiles, key=lambda n: (n != "strict", n)):  # strict's message is the richer one
        prof = profiles[name]
        if not isinstance(prof, Mapping):
            continue
        for row in case_rows({**prof, "profile": name}):
            if row.outcome == "passed":
                continue
            prev = merged.get(row.nodeid)
            if prev is None:
                merged[row.nodeid] = row
            else:
                merged[row.nodeid] = CaseRow(
                    prev.nodeid, prev.outcome, prev.line or row.line, (*prev.profiles, name), prev.phase, prev.duration
                )
    return sorted(merged.values(), key=lambda r: _ORDER.get(r.outcome, 9))


def _endpoints(ac: Any) -> dict[tuple[str, str], Mapping[str, Any]]:
    if not isinstance(ac, Mapping) or not isinstance(ac.get("endpoints"), list):
        return {}
    return {
        (str(x.get("method", "")).upper(), str(x.get("path", ""))): x for x in ac["endpoints"] if isinstance(x, Mapping)
    }


@dataclass(frozen=True)
class ACDisagreement:
    """README endpoints static AC (source text) and dynamic AC (probing the service) judge differently."""

    static_only: tuple[str, ...]  # counted from the source but the running service does not serve them
    dynamic_only: tuple[str, ...]  # served by the running service but not found in the source

    def lines(self) -> list[str]:
        out = []
        if self.static_only:
            out.append("static AC counts, the running service does not serve: " + "; ".join(self.static_only))
        if self.dynamic_only:
            out.append("the running service serves, static AC misses: " + "; ".join(self.dynamic_only))
        return out


def ac_disagreement(profiles: Mapping[str, Mapping[str, Any]]) -> ACDisagreement | None:
    """Where static AC (strict's, else compat's) and strict's dynamic AC disagree, endpoint by
    endpoint, with each side's evidence; None when they agree or one side is missing."""
    strict = profiles.get("strict") if isinstance(profiles.get("strict"), Mapping) else None
    if strict is None:
        return None
    static_ac = strict.get("api_coverage") or (profiles.get("compat") or {}).get("api_coverage")
    static, dynamic = _endpoints(static_ac), _endpoints(strict.get("dynamic_api_coverage"))
    if not static or not dynamic:
        return None

    def show(key: tuple[str, str]) -> str:
        s, d = static[key], dynamic[key]
        probe = f"probe {d.get('status')}" if d.get("status") is not None else "probe"
        return _clip(
            f"{key[0]} {key[1]} (static: {s.get('evidence') or 'not found'}; {probe}: {d.get('evidence') or '-'})"
        )

    both = [k for k in static if k in dynamic]
    static_only = tuple(show(k) for k in both if static[k].get("implemented") and not dynamic[k].get("implemented"))
    dynamic_only = tuple(show(k) for k in both if dynamic[k].get("implemented") and not static[k].get("implemented"))
    if not static_only and not dynamic_only:
        return None
    return ACDisagreement(static_only, dynamic_only)


def failure_text(row: CaseRow) -> str:
    """One line for a test not passed: outcome, node id, profiles, message line."""
    where = f" [{', '.join(row.profiles)}]" if row.profiles else ""
    return f"{row.outcome} {row.nodeid}{where}" + (f" — {row.line}" if row.line else "")


def capped(lines: Sequence[str], cap: int = DEFAULT_CAP) -> list[str]:
    """The first `cap` lines, then `… and N more` when there are more."""
    if len(lines) <= cap:
        return list(lines)
    return [*lines[:cap], f"… and {len(lines) - cap} more"]


def explain_lines(profiles: Mapping[str, Mapping[str, Any]], cap: int = DEFAULT_CAP) -> list[str]:
    """The text explanation of one result: tests not passed (capped), then any AC disagreement."""
    lines = capped([failure_text(r) for r in not_passed(profiles)], cap)
    found = ac_disagreement(profiles)
    return lines + (found.lines() if found else [])


def entry_profiles(entry: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The per-profile dicts of a report entry (a plain upstream dict is its compat profile)."""
    profiles = (entry.get("rgbridge") or {}).get("profiles") if isinstance(entry.get("rgbridge"), Mapping) else None
    if isinstance(profiles, Mapping) and profiles:
        return {str(k): v for k, v in profiles.items() if isinstance(v, Mapping)}
    return {"compat": entry}


def render_explanations(entries: Iterable[Mapping[str, Any]], console: Any, cap: int = DEFAULT_CAP) -> None:
    """Print, per repo with something to explain, its explanation lines (rich Text: no markup)."""
    from rich.text import Text

    for entry in sorted(entries, key=lambda r: str(r.get("repo_name", ""))):
        lines = explain_lines(entry_profiles(entry), cap)
        if not lines:
            continue
        console.print(Text(f"{sanitize_terminal(str(entry.get('repo_name', '?')))}: why not full marks", style="bold"))
        for line in lines:
            console.print(Text(f"  {line}"), soft_wrap=True)
