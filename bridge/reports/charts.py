"""Inline SVG charts of a recording: the session timeline and score over time (no scripts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.recording.timeline import fmt_secs
from bridge.reports.markup import e


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
            f"<title>running {e(fmt_secs(sp.get('seconds') or 0))}</title></rect>"
        )
    for pz in (tl.get("clock") or {}).get("pauses", []):
        x0, x1 = x(pz.get("start_s")), x(pz.get("end_s"))
        parts.append(
            f'<rect x="{x0:.1f}" y="22" width="{max(1.0, x1 - x0):.1f}" height="16" fill="#c4ccd6">'
            f"<title>paused {e(fmt_secs(pz.get('seconds') or 0))}</title></rect>"
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
            f"<title>{int(b['total'])} file events from {e(fmt_secs(b['start_s']))}</title></rect>"
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
            f'<text x="{tx:.1f}" y="146" font-size="11" fill="#6b7a8c" text-anchor="middle">{e(fmt_secs(t))}</text>'
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
            f'text-anchor="middle">{e(fmt_secs(t))}</text>'
        )
    # Each series differs in colour, dash and marker, so they stay apart where they overlap
    # (Pass@1 and DSR are often both 1.0) and in greyscale print.
    series = [
        ("Pass@1", "#2e6bd9", "", "circle", [float(p.get("pass_at_1") or 0.0) for p in points]),
        ("DSR", "#3fb37f", "8 4", "square", [1.0 if p.get("dsr") else 0.0 for p in points]),
        ("AC", "#e08a00", "2 3", "triangle", [float(p.get("ac") or 0.0) for p in points]),
    ]
    for k, (name, color, dash, marker, vals) in enumerate(series):
        pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in zip(ts, vals, strict=True))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        if len(vals) > 1:
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{dash_attr}/>')
        for t, v, p in zip(ts, vals, points, strict=True):
            parts.append(
                _marker(marker, x(t), y(v), color, f"{e(name)} {v:.4f} at {e(fmt_secs(t))} ({e(p.get('outcome'))})")
            )
        ly = top + 14 + 22 * k
        lx = left + pw + 12
        parts.append(
            f'<line x1="{lx}" y1="{ly - 7}" x2="{lx + 30}" y2="{ly - 7}" stroke="{color}" stroke-width="2"{dash_attr}/>'
            + _marker(marker, lx + 15, ly - 7, color, e(name))
            + f'<text x="{lx + 38}" y="{ly - 3}" font-size="12" fill="#1d2430">{e(name)}</text>'
        )
    parts.append(
        f'<text x="{left + pw / 2:.1f}" y="{height - 4}" font-size="11" fill="#6b7a8c" '
        f'text-anchor="middle">wall-clock time since session start</text></svg>'
    )
    return "".join(parts)


def _marker(shape: str, cx: float, cy: float, color: str, title: str) -> str:
    """A point marker: circle, square or triangle (the series' shape in the curve and its legend)."""
    if shape == "square":
        body = f'<rect x="{cx - 4:.1f}" y="{cy - 4:.1f}" width="8" height="8" fill="{color}">'
        end = "</rect>"
    elif shape == "triangle":
        body = f'<path d="M{cx:.1f},{cy - 5:.1f} l5,9 h-10 z" fill="{color}">'
        end = "</path>"
    else:
        body = f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{color}">'
        end = "</circle>"
    return f"{body}<title>{title}</title>{end}"
