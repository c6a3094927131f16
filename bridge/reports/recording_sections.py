"""The recording sections of a report page: timeline, score over time, clock, MCP calls, notes,
most changed files, the agent's model calls (its wire transcript), what happened, and every
result of the recording.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.reports.charts import curve_svg, timeline_svg
from bridge.reports.markup import MAX_ENTRIES, e, num, pass_fail, table
from bridge.reports.wire_sections import wire_transcript_html


def recording_html(rec_dir: Path, report: Mapping[str, Any]) -> str:
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
            table(
                ["#", "wall", "working", "files", "outcome", "DSR", "Pass@1", "AC"],
                (
                    [
                        str(int(p["index"])),
                        e(fmt_secs(p["moment"]["wall_seconds"])),
                        e(fmt_secs(p["moment"]["working_seconds"])),
                        str(int(p.get("files") or 0)),
                        e(p.get("outcome")),
                        pass_fail(p.get("dsr")),
                        f"{int(p.get('passed') or 0)}/{int(p.get('total') or 0)} ({num(p.get('pass_at_1'))})",
                        num(p.get("ac")),
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
        table(
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
        table(
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
            + table(
                ["path", "changes"],
                ([f"<code>{e(t['path'])}</code>", str(int(t["changes"]))] for t in top),
                numeric={1},
            )
        )
    entries = tl["entries"][:MAX_ENTRIES]
    agent = tl.get("agent")
    if agent:
        out.append(
            f"<h3>Agent</h3><p>{e(agent['name'])} {e(agent['version'])}, model {e(agent['model'] or '?')}: "
            f"{len(agent['steps'])} steps, {int(agent['tool_calls'])} tool calls (kind <code>agent</code> below, "
            "beside the file events)</p>"
        )
    out.append(wire_transcript_html(rec_dir))
    out.append(
        "<h3>What happened</h3>"
        + table(
            ["seq", "wall", "kind", "detail"],
            # an agent step's seq is "a<step>" (bridge/recording/agent_trace.py), an event's a number
            ([e(str(x["seq"])), e(fmt_secs(x["t_s"])), e(x["kind"]), e(x["text"][:500])] for x in entries),
            numeric={0},
        )
    )
    if len(tl["entries"]) > MAX_ENTRIES:
        out.append(
            f"<p class='muted'>… {len(tl['entries']) - MAX_ENTRIES} more (see <code>rgbridge timeline --json</code>)</p>"
        )
    if tl["scores"]:
        out.append(
            "<h3>All results of this recording</h3>"
            + table(
                ["result", "grader", "moment", "profile", "outcome", "DSR", "Pass@1", "AC"],
                (
                    [
                        e(r["name"]),
                        e(r.get("grader_version")),
                        e((r.get("moment") or {}).get("spec")),
                        e(p),
                        e(s.get("outcome")),
                        pass_fail(s.get("dsr")),
                        f"{e(s.get('passed'))}/{e(s.get('total'))} ({num(s.get('pass_at_1'))})",
                        num(s.get("api_coverage")),
                    ]
                    for r in tl["scores"]
                    for p, s in r["summary"].items()
                ),
            )
        )
    return "".join(out)
