"""One self-contained HTML report of a run or a recording (`rgbridge report ... --html OUT`).

The page has inline CSS and inline SVG only: no scripts, no external fonts, images or styles,
so it opens anywhere, offline, and can be mailed around. Every string that comes from a
recording or a report (task names, test ids, messages, notes, tool names) is untrusted and is
HTML-escaped; numbers are formatted by us.

A RUN_DIR is read through its `report_<run_id>.json` (written by `reporting.RunWriter`); a
recording is shown as a one-task run of its latest result, plus its timeline and a
score-over-time chart (from the newest `results/curve-*.json`, else the submission alone).
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bridge.errors import RecordingError, ScoringError
from bridge.scoring.reporting import build_entry, profile_rows, summarize_strict, summarize_upstream
from bridge.scoring.result import ScoreResult
from bridge.sessions.contamination import evidence, mark_entries
from bridge.textsafe import show_raw_bytes

LANGS = ("python", "java")
_MAX_TESTS = 200
_MAX_ENTRIES = 300


def e(value: Any) -> str:
    """Escape any value for HTML text or attribute context."""
    return html.escape(show_raw_bytes("" if value is None else str(value)), quote=True)


def _num(x: Any, digits: int = 4) -> str:
    if x is None:
        return "–"
    try:
        return f"{float(x):.{digits}f}"
    except (TypeError, ValueError):
        return e(x)


# ----------------------------------------------------------------------------- inputs


def load_run_report(run_dir: Path | str, run_id: str | None = None) -> tuple[Path, dict[str, Any]]:
    run_dir = Path(run_dir)
    if run_id:
        path = run_dir / f"report_{run_id}.json"
        if not path.is_file():
            raise ScoringError(f"{run_dir}: no report_{run_id}.json")
    else:
        reports = sorted(run_dir.glob("report_*.json"))
        if not reports:
            raise ScoringError(f"{run_dir}: no report_<run_id>.json (run `rgbridge evaluate` first)")
        path = reports[-1]  # run ids are timestamps: the last sorts newest
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ScoringError(f"{path}: unreadable report: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ScoringError(f"{path}: not a run report (no results list)")
    return path, data


def report_from_entries(entries: list[dict[str, Any]], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The same aggregates RunWriter.finalize writes, for entries built elsewhere."""
    return {
        "metadata": dict(metadata),
        "summary": summarize_upstream(entries),
        "results": entries,
        "strict_summary": summarize_strict(profile_rows(entries, "strict")),
        "compat_strict_view": summarize_strict(profile_rows(entries, "compat")),
    }


def recording_report(rec_dir: Path | str) -> dict[str, Any]:
    """A recording's latest result as a one-task run report."""
    from bridge.recording.reader import load_meta
    from bridge.recording.results import latest_result

    rec_dir = Path(rec_dir)
    meta = load_meta(rec_dir)
    latest = latest_result(rec_dir)
    entries: list[dict[str, Any]] = []
    md: dict[str, Any] = {
        "session_id": meta.session_id,
        "task_id": meta.task_id,
        "state": meta.state,
        "created_at": meta.created_at,
        "timestamp": meta.ended_at or meta.created_at,
        "client": f"{meta.client.name} {meta.client.version}".strip(),
        "mode": meta.mode,
    }
    extra = meta.model_extra or {}
    if isinstance(extra.get("attempt"), int):  # recorded since attempts exist (bridge/sessions/attempts.py)
        md.update(attempt=extra["attempt"], run_id=str(extra.get("run_id") or ""))
    if latest is not None:
        try:
            result = ScoreResult.model_validate_json((rec_dir / latest["path"]).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RecordingError(f"{latest['path']}: unreadable result: {str(exc).splitlines()[0]}") from None
        entries.append(build_entry(result))
        md.update(
            result=latest["name"],
            grader_version=result.grader_version,
            moment=(latest.get("moment") or {}).get("spec", ""),
        )
    # Golden files opened while the session was open (bridge/sessions/contamination.py): on every entry.
    mark_entries(entries, rec_dir)
    md["contaminated"] = bool(evidence(rec_dir))
    return report_from_entries(entries, md)


# ----------------------------------------------------------------------------- pieces

CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:24px auto;max-width:1100px;
 color:#1d2430;background:#fff;padding:0 16px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:2px solid #e3e8ef;padding-bottom:4px}
h3{font-size:16px;margin:18px 0 6px}h4{font-size:14px;margin:10px 0 4px;color:#3b4a5e}
table{border-collapse:collapse;margin:6px 0 12px;min-width:50%}
th,td{border:1px solid #d5dce5;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f2f5f9;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.meta td:first-child{color:#5a6b80;white-space:nowrap}
.pass{color:#0a7a3b;font-weight:600}.fail{color:#b42318;font-weight:600}.muted{color:#6b7a8c}
.task{border:1px solid #e3e8ef;border-radius:6px;padding:6px 14px 10px;margin:12px 0}
ul{margin:4px 0 8px;padding-left:22px}li{margin:1px 0}code{font:12px ui-monospace,Menlo,Consolas,monospace;
 background:#f4f6f8;padding:0 3px;border-radius:3px;word-break:break-all}
.cols{display:flex;gap:24px;flex-wrap:wrap}.cols>div{flex:1 1 300px}
svg{display:block;margin:6px 0 14px;max-width:100%;height:auto}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;background:#eef2f6;color:#33475b}
.note{white-space:pre-wrap}
"""


def _table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "", numeric: set[int] | None = None
) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{e(h)}</th>" for h in headers) if any(headers) else ""
    body = []
    for row in rows:
        cells = "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    cls_attr = f' class="{e(cls)}"' if cls else ""
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return f"<table{cls_attr}>{thead}<tbody>{''.join(body)}</tbody></table>"


def _pf(ok: Any) -> str:
    return '<span class="pass">PASS</span>' if ok else '<span class="fail">FAIL</span>'


def _summary_html(report: Mapping[str, Any]) -> str:
    up = report.get("summary") or {}
    st = report.get("strict_summary") or {}
    rows = [
        [
            "all",
            str(up.get("total_repos", 0)),
            _num(up.get("avg_pass_at_1")),
            _num(up.get("avg_api_coverage")),
            _num(up.get("deployment_success_rate")),
        ]
    ]
    for lang in LANGS:
        n = up.get(f"{lang}_repos")
        if n:
            rows.append(
                [
                    lang,
                    str(n),
                    _num((up.get("pass_at_1_by_lang") or {}).get(lang)),
                    _num((up.get("ac_by_lang") or {}).get(lang)),
                    _num((up.get("dsr_by_lang") or {}).get(lang)),
                ]
            )
    out = [
        "<h2>Summary</h2><div class='cols'><div>",
        "<h4>compat — upstream RepoGenesis rules</h4>",
        _table(["scope", "repos", "Pass@1", "AC", "DSR"], rows, numeric={1, 2, 3, 4}),
        "<p class='muted'>Macro means as upstream: repos with no collected tests are left out of Pass@1, "
        "repos whose README lists no endpoints out of AC; DSR is over all repos.</p></div><div>",
        "<h4>strict — golden tests in a separate tester</h4>",
    ]
    srows = [
        [
            "all",
            str(st.get("counted_repos", 0)),
            _num(st.get("avg_pass_at_1")),
            _num(st.get("deployment_success_rate")),
            _num(st.get("avg_api_coverage")),
            _num(st.get("avg_dynamic_api_coverage")),
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
                    _num(b.get("avg_pass_at_1")),
                    _num(b.get("deployment_success_rate")),
                    _num(b.get("avg_api_coverage")),
                    _num(b.get("avg_dynamic_api_coverage")),
                    "–",
                ]
            )
    out.append(
        _table(
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


def _profile_html(name: str, prof: Mapping[str, Any]) -> str:
    dsr = prof.get("dsr") or {}
    p1 = prof.get("pass_at_1") or {}
    parts = [f"<h4>{e(name)} <span class='badge'>{e(prof.get('outcome'))}</span></h4>"]
    rows = [
        ["DSR", f"{_pf(dsr.get('success'))} <span class='muted'>{e(dsr.get('message'))}</span>"],
        [
            "Pass@1",
            f"{int(p1.get('passed') or 0)}/{int(p1.get('total') or 0)} ({_num(p1.get('score'))}) — failed "
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
                    f"({_num(ac.get('score'))}) <span class='muted'>{e(ac.get('note'))}</span>",
                ]
            )
    for key in ("build_error", "error"):
        if prof.get(key):
            rows.append([key.replace("_", " "), f"<code>{e(str(prof.get(key))[:2000])}</code>"])
    parts.append(_table(["", ""], ([e(a), b] for a, b in rows), cls="meta"))
    bad = [t for t in (prof.get("tests") or []) if t.get("outcome") != "passed"]
    if bad:
        items = "".join(
            f"<li><code>{e(t.get('nodeid'))}</code> <span class='badge'>{e(t.get('outcome'))}</span> "
            f"<span class='muted'>{e(str(t.get('message') or '')[:300])}</span></li>"
            for t in bad[:_MAX_TESTS]
        )
        more = f"<li class='muted'>… {len(bad) - _MAX_TESTS} more</li>" if len(bad) > _MAX_TESTS else ""
        parts.append(f"<div><b>Tests not passed ({len(bad)})</b><ul>{items}{more}</ul></div>")
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


def _contamination_html(found: Sequence[Mapping[str, Any]]) -> str:
    rows = ([f"<code>{e(x.get('path'))}</code>", e(x.get("kind")), e(x.get("at"))] for x in found[:_MAX_ENTRIES])
    return (
        "<p class='fail'>CONTAMINATED: golden test or solution files were opened while the session was open; "
        "this score cannot be trusted.</p>" + _table(["path", "access", "at"], rows)
    )


def _tasks_html(results: Sequence[Mapping[str, Any]]) -> str:
    out = [f"<h2>Tasks ({len(results)})</h2>"]
    for entry in sorted(results, key=lambda r: str(r.get("repo_name", ""))):
        profiles = (entry.get("rgbridge") or {}).get("profiles") or {}
        if not profiles:  # a plain upstream dict
            profiles = {"compat": entry}
        out.append(
            f"<div class='task'><h3>{e(entry.get('repo_name'))} <span class='badge'>{e(entry.get('lang'))}</span> "
            f"<span class='badge'>{e(entry.get('framework'))}</span></h3>"
        )
        if entry.get("contaminated"):
            out.append(_contamination_html(entry.get("contamination") or []))
        snap = (entry.get("rgbridge") or {}).get("snapshot_hash")
        if snap:
            out.append(
                f"<p class='muted'>snapshot <code>{e(str(snap)[:16])}</code> grader "
                f"{e((entry.get('rgbridge') or {}).get('grader_version'))}</p>"
            )
        out.append("<div class='cols'>")
        for name in sorted(profiles, key=lambda n: (n != "compat", n)):
            out.append(f"<div>{_profile_html(name, profiles[name])}</div>")
        out.append("</div></div>")
    if not results:
        out.append("<p class='muted'>No results.</p>")
    return "".join(out)


# ----------------------------------------------------------------------------- SVG charts


def _fmt_t(seconds: float) -> str:
    from bridge.recording.timeline import fmt_secs

    return fmt_secs(seconds)


def timeline_svg(tl: Mapping[str, Any], width: int = 1000) -> str:
    """Clock spans (green), pauses (grey), checkpoints (ticks), notes (blue), MCP calls (dots;
    errors red) and the submission (red line) on one wall-clock axis."""
    wall = max(float((tl.get("duration") or {}).get("wall_seconds") or 0.0), 1e-3)
    left, right, height = 70, 20, 150
    span_w = width - left - right

    def x(t: Any) -> float:
        return left + span_w * min(max(float(t or 0.0), 0.0), wall) / wall

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="session timeline">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fbfcfd"/>',
    ]
    rows = {"clock": 30, "files": 60, "mcp": 90, "notes": 118}
    for label, y in rows.items():
        parts.append(
            f'<text x="8" y="{y + 4}" font-size="12" fill="#5a6b80">{e(label)}</text>'
            f'<line x1="{left}" y1="{y}" x2="{width - right}" y2="{y}" stroke="#e3e8ef"/>'
        )
    for sp in (tl.get("clock") or {}).get("spans", []):
        x0, x1 = x(sp.get("start_s")), x(sp.get("end_s") if sp.get("end_s") is not None else wall)
        parts.append(
            f'<rect x="{x0:.1f}" y="22" width="{max(1.0, x1 - x0):.1f}" height="16" fill="#3fb37f">'
            f"<title>running {e(_fmt_t(sp.get('seconds') or 0))}</title></rect>"
        )
    for pz in (tl.get("clock") or {}).get("pauses", []):
        x0, x1 = x(pz.get("start_s")), x(pz.get("end_s"))
        parts.append(
            f'<rect x="{x0:.1f}" y="22" width="{max(1.0, x1 - x0):.1f}" height="16" fill="#c4ccd6">'
            f"<title>paused {e(_fmt_t(pz.get('seconds') or 0))}</title></rect>"
        )
    buckets = (tl.get("histogram") or {}).get("buckets") or []
    size = float((tl.get("histogram") or {}).get("bucket_seconds") or 1)
    top = max([b.get("total", 0) for b in buckets] + [1])
    for b in buckets:
        if not b.get("total"):
            continue
        h = 24 * b["total"] / top
        x0 = x(b["start_s"])
        w = max(1.5, x(min(b["start_s"] + size, wall)) - x0 - 1)
        parts.append(
            f'<rect x="{x0:.1f}" y="{72 - h:.1f}" width="{w:.1f}" height="{h:.1f}" fill="#5b8def">'
            f"<title>{int(b['total'])} file events from {e(_fmt_t(b['start_s']))}</title></rect>"
        )
    for ck in tl.get("checkpoints") or []:
        cx = x(ck.get("t_s"))
        parts.append(
            f'<line x1="{cx:.1f}" y1="74" x2="{cx:.1f}" y2="80" stroke="#33475b">'
            f"<title>checkpoint {e(ck.get('reason'))} {e(str(ck.get('commit'))[:12])}</title></line>"
        )
    for call in (tl.get("mcp_calls") or {}).get("calls", []):
        color = "#3b4a5e" if call.get("ok") else "#d92d20"
        parts.append(
            f'<circle cx="{x(call.get("t_s")):.1f}" cy="90" r="3.5" fill="{color}">'
            f"<title>{e(call.get('tool'))}{'' if call.get('ok') else ' — error: ' + e(call.get('error'))}</title></circle>"
        )
    for note in tl.get("notes") or []:
        nx = x(note.get("t_s"))
        parts.append(
            f'<path d="M{nx:.1f},111 l5,9 h-10 z" fill="#2e6bd9"><title>{e(str(note.get("text"))[:300])}</title></path>'
        )
    sub = tl.get("submission")
    if sub and sub.get("t_s") is not None:
        sx = x(sub["t_s"])
        parts.append(
            f'<line x1="{sx:.1f}" y1="14" x2="{sx:.1f}" y2="128" stroke="#d92d20" stroke-width="2"/>'
            f'<text x="{min(sx + 4, width - 70):.1f}" y="13" font-size="11" fill="#d92d20">submit</text>'
        )
    for i in range(6):
        t = wall * i / 5
        tx = x(t)
        parts.append(
            f'<line x1="{tx:.1f}" y1="130" x2="{tx:.1f}" y2="134" stroke="#6b7a8c"/>'
            f'<text x="{tx:.1f}" y="146" font-size="11" fill="#6b7a8c" text-anchor="middle">{e(_fmt_t(t))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def curve_svg(
    points: Sequence[Mapping[str, Any]], *, width: int = 1000, height: int = 260, wall: float | None = None
) -> str:
    """Pass@1, DSR and AC over wall-clock time (one point per scored moment)."""
    left, right, top, bottom = 60, 130, 16, 36
    pw, ph = width - left - right, height - top - bottom
    ts = [float((p.get("moment") or {}).get("wall_seconds") or 0.0) for p in points]
    tmax = max([wall or 0.0] + ts + [1e-3])

    def x(t: float) -> float:
        return left + pw * (t / tmax)

    def y(v: float) -> float:
        return top + ph * (1 - max(0.0, min(1.0, v)))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="score over time">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fbfcfd"/>',
    ]
    for i in range(5):
        v = i / 4
        parts.append(
            f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + pw}" y2="{y(v):.1f}" stroke="#e3e8ef"/>'
            f'<text x="{left - 8}" y="{y(v) + 4:.1f}" font-size="11" fill="#6b7a8c" text-anchor="end">{v:.2f}</text>'
        )
    for i in range(6):
        t = tmax * i / 5
        parts.append(
            f'<text x="{x(t):.1f}" y="{top + ph + 18}" font-size="11" fill="#6b7a8c" '
            f'text-anchor="middle">{e(_fmt_t(t))}</text>'
        )
    series = [
        ("Pass@1", "#2e6bd9", [float(p.get("pass_at_1") or 0.0) for p in points]),
        ("DSR", "#3fb37f", [1.0 if p.get("dsr") else 0.0 for p in points]),
        ("AC", "#e08a00", [float(p.get("ac") or 0.0) for p in points]),
    ]
    for k, (name, color, vals) in enumerate(series):
        pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(ts, vals, strict=True))
        if len(vals) > 1:
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        for t, v, p in zip(ts, vals, points, strict=True):
            parts.append(
                f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="4" fill="{color}">'
                f"<title>{e(name)} {v:.4f} at {e(_fmt_t(t))} ({e(p.get('outcome'))})</title></circle>"
            )
        ly = top + 14 + 20 * k
        parts.append(
            f'<rect x="{left + pw + 16}" y="{ly - 9}" width="14" height="4" fill="{color}"/>'
            f'<text x="{left + pw + 36}" y="{ly - 4}" font-size="12" fill="#1d2430">{e(name)}</text>'
        )
    parts.append(
        f'<text x="{left + pw / 2:.1f}" y="{height - 4}" font-size="11" fill="#6b7a8c" '
        f'text-anchor="middle">wall-clock time since session start</text></svg>'
    )
    return "".join(parts)


def _recording_html(rec_dir: Path, report: Mapping[str, Any]) -> str:
    from bridge.recording.curve import latest_curve
    from bridge.recording.timeline import build_timeline, fmt_secs

    tl = build_timeline(rec_dir)
    d = tl["duration"]
    out = [
        "<h2>Session timeline</h2>",
        f"<p>wall {e(fmt_secs(d['wall_seconds']))} · working {e(fmt_secs(d['working_seconds']))} · paused "
        f"{e(fmt_secs(d['paused_seconds']))} · {int(tl['files']['events'])} file events on {int(tl['files']['paths'])} "
        f"paths · {int(tl['mcp_calls']['total'])} MCP calls ({int(tl['mcp_calls']['errors'])} errors) · "
        f"{len(tl['notes'])} notes · {len(tl['checkpoints'])} checkpoints</p>",
        timeline_svg(tl),
    ]
    curve = latest_curve(rec_dir)
    out.append("<h2>Score over time</h2>")
    if curve and curve.get("points"):
        out.append(
            f"<p class='muted'>{e(curve.get('profile'))} profile, grader {e(curve.get('grader_version'))}, "
            f"{len(curve['points'])} moments ({e(curve.get('distinct_snapshots'))} distinct snapshots).</p>"
        )
        out.append(curve_svg(curve["points"], wall=d["wall_seconds"]))
        out.append(
            _table(
                ["#", "wall", "working", "files", "outcome", "DSR", "Pass@1", "AC"],
                (
                    [
                        str(int(p["index"])),
                        e(fmt_secs(p["moment"]["wall_seconds"])),
                        e(fmt_secs(p["moment"]["working_seconds"])),
                        str(int(p.get("files") or 0)),
                        e(p.get("outcome")),
                        _pf(p.get("dsr")),
                        f"{int(p.get('passed') or 0)}/{int(p.get('total') or 0)} ({_num(p.get('pass_at_1'))})",
                        _num(p.get("ac")),
                    ]
                    for p in curve["points"]
                ),
                numeric={0, 3},
            )
        )
    else:
        pts = []
        sub = tl.get("submission")
        for entry in report.get("results") or []:
            prof = ((entry.get("rgbridge") or {}).get("profiles") or {}).get("strict") or entry
            pts.append(
                {
                    "moment": {"wall_seconds": (sub or {}).get("t_s") or d["wall_seconds"]},
                    "pass_at_1": (prof.get("pass_at_1") or {}).get("score"),
                    "dsr": (prof.get("dsr") or {}).get("success"),
                    "ac": (prof.get("api_coverage") or {}).get("score"),
                    "outcome": prof.get("outcome"),
                }
            )
        if pts:
            out.append("<p class='muted'>No curve stored (run <code>rgbridge curve</code>): the submission only.</p>")
            out.append(curve_svg(pts, wall=d["wall_seconds"]))
        else:
            out.append("<p class='muted'>Not scored.</p>")
    out.append("<div class='cols'><div><h3>Clock</h3>")
    spans = [("run", s) for s in tl["clock"]["spans"]] + [("pause", p) for p in tl["clock"]["pauses"]]
    spans.sort(key=lambda kv: kv[1].get("start_s") or 0)
    out.append(
        _table(
            ["span", "from", "to", "seconds"],
            (
                [
                    k,
                    e(fmt_secs(s.get("start_s"))),
                    "open" if s.get("open") else e(fmt_secs(s.get("end_s"))),
                    f"{float(s.get('seconds') or 0):.1f}",
                ]
                for k, s in spans
            ),
            numeric={3},
        )
    )
    out.append("</div><div><h3>MCP calls</h3>")
    by_tool = tl["mcp_calls"]["by_tool"]
    out.append(
        _table(
            ["tool", "ok", "error"],
            ([e(t), str(int(c["ok"])), str(int(c["error"]))] for t, c in sorted(by_tool.items())),
            numeric={1, 2},
        )
        if by_tool
        else "<p class='muted'>none</p>"
    )
    out.append("</div></div>")
    if tl["notes"]:
        out.append(
            "<h3>Notes</h3><ul>"
            + "".join(
                f"<li><span class='muted'>{e(fmt_secs(n['t_s']))}</span> <span class='note'>{e(n['text'][:5000])}</span></li>"
                for n in tl["notes"]
            )
            + "</ul>"
        )
    top = tl["files"]["top"]
    if top:
        out.append(
            "<h3>Most changed files</h3>"
            + _table(
                ["path", "changes"],
                ([f"<code>{e(t['path'])}</code>", str(int(t["changes"]))] for t in top),
                numeric={1},
            )
        )
    entries = tl["entries"][:_MAX_ENTRIES]
    out.append(
        "<h3>What happened</h3>"
        + _table(
            ["seq", "wall", "kind", "detail"],
            ([str(int(x["seq"])), e(fmt_secs(x["t_s"])), e(x["kind"]), e(x["text"][:500])] for x in entries),
            numeric={0},
        )
    )
    if len(tl["entries"]) > _MAX_ENTRIES:
        out.append(
            f"<p class='muted'>… {len(tl['entries']) - _MAX_ENTRIES} more (see <code>rgbridge timeline --json</code>)</p>"
        )
    if tl["scores"]:
        out.append(
            "<h3>All results of this recording</h3>"
            + _table(
                ["result", "grader", "moment", "profile", "outcome", "DSR", "Pass@1", "AC"],
                (
                    [
                        e(r["name"]),
                        e(r.get("grader_version")),
                        e((r.get("moment") or {}).get("spec")),
                        e(p),
                        e(s.get("outcome")),
                        _pf(s.get("dsr")),
                        f"{e(s.get('passed'))}/{e(s.get('total'))} ({_num(s.get('pass_at_1'))})",
                        _num(s.get("api_coverage")),
                    ]
                    for r in tl["scores"]
                    for p, s in r["summary"].items()
                ),
            )
        )
    return "".join(out)


def _page(title: str, meta: Mapping[str, Any], body: str) -> str:
    rows = "".join(
        f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>"
        for k, v in meta.items()
        if v not in (None, "", [], {}) and not isinstance(v, (dict, list))
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{e(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{e(title)}</h1><table class='meta'><tbody>{rows}</tbody></table>{body}"
        "<p class='muted'>Generated by repogenesis-bridge.</p></body></html>\n"
    )


def render_html(target: Path | str, *, run_id: str | None = None) -> str:
    """The HTML page of a RUN_DIR (with report_<run_id>.json) or of a recording."""
    target = Path(target)
    if (target / "session.json").is_file():
        report = recording_report(target)
        md = report["metadata"]
        title = f"Recording {md.get('session_id')} — {md.get('task_id')}"
        body = _summary_html(report) + _tasks_html(report["results"]) + _recording_html(target, report)
        if md.get("contaminated") and not report["results"]:  # not scored: the evidence still shows
            body = _contamination_html(evidence(target)) + body
        return _page(title, md, body)
    path, report = load_run_report(target, run_id)
    md = dict(report.get("metadata") or {})
    md.setdefault("report", path.name)
    title = f"RepoGenesis run {md.get('run_id') or path.stem.removeprefix('report_')}"
    return _page(title, md, _summary_html(report) + _tasks_html(report["results"]))


def write_html(target: Path | str, out_html: Path | str, *, run_id: str | None = None) -> Path:
    out = Path(out_html)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(target, run_id=run_id), encoding="utf-8")
    return out
