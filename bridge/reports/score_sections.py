"""The score sections of a report page: the summary under both profiles and one block per task
(outcome, DSR, Pass@1, AC, the per-test table, endpoints, static/dynamic AC disagreement,
contamination evidence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.reports.leaderboard import agent_error_class
from bridge.reports.markup import MAX_ENTRIES, e, num, pass_fail, table
from bridge.scoring.explanations import ac_disagreement, case_rows

LANGS = ("python", "java")
_MAX_TESTS = 200


def summary_html(report: Mapping[str, Any]) -> str:
    up = report.get("summary") or {}
    st = report.get("strict_summary") or {}
    rows = [
        [
            "all",
            str(up.get("total_repos", 0)),
            num(up.get("avg_pass_at_1")),
            num(up.get("avg_api_coverage")),
            num(up.get("deployment_success_rate")),
        ]
    ]
    for lang in LANGS:
        n = up.get(f"{lang}_repos")
        if n:
            rows.append(
                [
                    lang,
                    str(n),
                    num((up.get("pass_at_1_by_lang") or {}).get(lang)),
                    num((up.get("ac_by_lang") or {}).get(lang)),
                    num((up.get("dsr_by_lang") or {}).get(lang)),
                ]
            )
    out = [
        "<h2>Summary</h2><div class='cols'><div>",
        "<h4>compat — upstream RepoGenesis rules</h4>",
        table(["scope", "repos", "Pass@1", "AC", "DSR"], rows, numeric={1, 2, 3, 4}),
        "<p class='muted'>Macro means as upstream: repos with no collected tests are left out of Pass@1, "
        "repos whose README lists no endpoints out of AC; DSR is over all repos.</p></div><div>",
        "<h4>strict — golden tests in a separate tester</h4>",
    ]
    srows = [
        [
            "all",
            str(st.get("counted_repos", 0)),
            num(st.get("avg_pass_at_1")),
            num(st.get("deployment_success_rate")),
            num(st.get("avg_api_coverage")),
            num(st.get("avg_dynamic_api_coverage")),
            str(st.get("infra_errors", 0)),
        ]
    ]
    for lang in LANGS:
        b = (st.get("by_lang") or {}).get(lang) or {}
        if b.get("repos"):
            srows.append(
                [
                    lang,
                    str(b.get("repos")),
                    num(b.get("avg_pass_at_1")),
                    num(b.get("deployment_success_rate")),
                    num(b.get("avg_api_coverage")),
                    num(b.get("avg_dynamic_api_coverage")),
                    "–",
                ]
            )
    out.append(
        table(
            ["scope", "counted", "Pass@1", "DSR", "AC", "dynamic AC", "infra errors"], srows, numeric={1, 2, 3, 4, 5, 6}
        )
    )
    outcomes = st.get("outcomes") or {}
    if outcomes:
        out.append(
            "<p>" + " ".join(f"<span class='badge'>{e(k)}: {int(v)}</span>" for k, v in outcomes.items()) + "</p>"
        )
    out.append(
        "<p class='muted'>Every repo counts in strict (no tests collected scores 0); infra errors are not "
        "the agent's and are excluded.</p></div></div>"
    )
    return "".join(out)


def profile_html(name: str, prof: Mapping[str, Any]) -> str:
    dsr = prof.get("dsr") or {}
    p1 = prof.get("pass_at_1") or {}
    parts = [f"<h4>{e(name)} <span class='badge'>{e(prof.get('outcome'))}</span></h4>"]
    rows = [
        ["DSR", f"{pass_fail(dsr.get('success'))} <span class='muted'>{e(dsr.get('message'))}</span>"],
        [
            "Pass@1",
            f"{int(p1.get('passed') or 0)}/{int(p1.get('total') or 0)} ({num(p1.get('score'))}) — failed "
            f"{int(p1.get('failed') or 0)}, errors {int(p1.get('errors') or 0)}, skipped "
            f"{int(p1.get('skipped') or 0)}, not run {int(p1.get('not_run') or 0)}",
        ],
    ]
    for key, label in (("api_coverage", "AC (static)"), ("dynamic_api_coverage", "AC (dynamic)")):
        ac = prof.get(key)
        if ac:
            rows.append(
                [
                    label,
                    f"{int(ac.get('implemented_apis') or 0)}/{int(ac.get('total_apis') or 0)} "
                    f"({num(ac.get('score'))}) <span class='muted'>{e(ac.get('note'))}</span>",
                ]
            )
    for key in ("build_error", "error"):
        if prof.get(key):
            rows.append([key.replace("_", " "), f"<code>{e(str(prof.get(key))[:2000])}</code>"])
    parts.append(table(["", ""], ([e(a), b] for a, b in rows), cls="meta"))
    ac = prof.get("api_coverage") or prof.get("dynamic_api_coverage")
    if ac and ac.get("endpoints"):
        found = [x for x in ac["endpoints"] if x.get("implemented")]
        missing = [x for x in ac["endpoints"] if not x.get("implemented")]

        def li(x: Mapping[str, Any]) -> str:
            ev = f" <span class='muted'>{e(x.get('evidence'))}</span>" if x.get("evidence") else ""
            return f"<li><code>{e(x.get('method'))} {e(x.get('path'))}</code>{ev}</li>"

        parts.append(
            "<div class='cols'>"
            f"<div><b>Endpoints found ({len(found)})</b><ul>{''.join(li(x) for x in found)}</ul></div>"
            f"<div><b>Endpoints missing ({len(missing)})</b><ul>{''.join(li(x) for x in missing)}</ul></div>"
            "</div>"
        )
    return "".join(parts)


_OUTCOME_CLASS = {"passed": "pass", "failed": "fail", "error": "fail"}


def tests_table(name: str, prof: Mapping[str, Any]) -> str:
    """The per-test table of one profile: every golden test, those not passed first, with its
    outcome, the phase that decided it, its duration and the line that explains it."""
    rows = case_rows({**prof, "profile": name})
    if not rows:
        return "<p class='muted'>no per-test results for this profile</p>"
    order = {"error": 0, "failed": 1, "not_run": 2, "skipped": 3}
    rows.sort(key=lambda r: order.get(r.outcome, 9))
    bad = sum(1 for r in rows if r.outcome != "passed")
    body = (
        [
            f"<code>{e(r.nodeid)}</code>",
            f"<span class='{_OUTCOME_CLASS.get(r.outcome, 'muted')}'>{e(r.outcome)}</span>",
            e(r.phase or "–"),
            f"{r.duration:.2f}s",
            f"<code>{e(r.line)}</code>" if r.line else "",
        ]
        for r in rows[:_MAX_TESTS]
    )
    more = f"<p class='muted'>… {len(rows) - _MAX_TESTS} more</p>" if len(rows) > _MAX_TESTS else ""
    return (
        f"<div class='tests'><b>Tests not passed ({bad})</b> <span class='muted'>of {len(rows)} ({e(name)})</span>"
        + table(["test", "outcome", "phase", "duration", "message"], body, cls="tests", numeric={3})
        + more
        + "</div>"
    )


def disagreement_html(profiles: Mapping[str, Mapping[str, Any]]) -> str:
    """A flag when static AC (the source) and dynamic AC (the running service) disagree."""
    found = ac_disagreement(profiles)
    if found is None:
        return ""
    sides = [("static AC counts, the running service does not serve", found.static_only)]
    sides.append(("the running service serves, static AC misses", found.dynamic_only))
    items = "".join(
        f"<div><b>{e(label)} ({len(xs)})</b><ul>{''.join(f'<li><code>{e(x)}</code></li>' for x in xs)}</ul></div>"
        for label, xs in sides
    )
    return f"<p class='fail'>Static and dynamic API coverage disagree</p><div class='cols'>{items}</div>"


def contamination_html(found: Sequence[Mapping[str, Any]]) -> str:
    rows = ([f"<code>{e(x.get('path'))}</code>", e(x.get("kind")), e(x.get("at"))] for x in found[:MAX_ENTRIES])
    return (
        "<p class='fail'>CONTAMINATED: golden test or solution files were opened while the session was open; "
        "this score cannot be trusted.</p>" + table(["path", "access", "at"], rows)
    )


def tasks_html(results: Sequence[Mapping[str, Any]]) -> str:
    out = [f"<h2>Tasks ({len(results)})</h2>"]
    for entry in sorted(results, key=lambda r: (str(r.get("repo_name", "")), str(r.get("attempt", "")))):
        cls = agent_error_class(entry)
        if cls is not None:  # the agent failed (bridge/reports/run_sections.py): nothing was scored
            raw = entry.get("agent_error")
            err: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
            out.append(
                f"<div class='task'><h3>{e(entry.get('repo_name'))} <span class='badge'>{e(entry.get('lang'))}</span> "
                f"<span class='badge'>attempt {e(entry.get('attempt'))}</span></h3>"
                f"<p class='fail'>agent_error: {e(cls)}</p><p class='muted'>{e(str(err.get('message') or '')[:2000])}"
                "</p><p class='muted'>Not scored as the agent's work; not counted in the means.</p></div>"
            )
            continue
        profiles = (entry.get("rgbridge") or {}).get("profiles") or {}
        if not profiles:  # a plain upstream dict
            profiles = {"compat": entry}
        out.append(
            f"<div class='task'><h3>{e(entry.get('repo_name'))} <span class='badge'>{e(entry.get('lang'))}</span> "
            f"<span class='badge'>{e(entry.get('framework'))}</span></h3>"
        )
        if entry.get("contaminated"):
            out.append(contamination_html(entry.get("contamination") or []))
        snap = (entry.get("rgbridge") or {}).get("snapshot_hash")
        if snap:
            out.append(
                f"<p class='muted'>snapshot <code>{e(str(snap)[:16])}</code> grader "
                f"{e((entry.get('rgbridge') or {}).get('grader_version'))}</p>"
            )
        out.append(disagreement_html(profiles))
        out.append("<div class='cols'>")
        for name in sorted(profiles, key=lambda n: (n != "compat", n)):
            out.append(f"<div>{profile_html(name, profiles[name])}</div>")
        out.append("</div>")
        for name in sorted(profiles, key=lambda n: (n != "compat", n)):
            out.append(tests_table(name, profiles[name]))
        out.append("</div>")
    if not results:
        out.append("<p class='muted'>No results.</p>")
    return "".join(out)
