"""The wire transcript on an attempt's recording page: each model call the model gateway
forwarded (`agent/wire.jsonl`: the request the agent sent and the provider's answer, already
redacted when it was written; docs/recording-format.md), one collapsible entry per call with its
status, latency, tokens and cost, and each call the gateway refused itself (a cost cap spent, an
unpriced model under a cap) marked refused with its reason. `<details>` opens without scripts (the
pages have none: bridge/reports/html.py). The file is read by bridge/recording/wire_transcript.py;
every recorded text is untrusted and escaped; the page holds at most `MAX_CALLS` calls and
`MAX_BODY_CHARS` of each body, and says so where it cut.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.recording.wire_transcript import PATH as TRANSCRIPT
from bridge.recording.wire_transcript import WireStats, refused, wire_records
from bridge.reports.markup import e

#: what of the transcript a page reads (a long run's transcript is many megabytes) and shows
MAX_READ_BYTES = 16 * 1024 * 1024
MAX_READ_CALLS = 20_000
MAX_CALLS = 200
MAX_BODY_CHARS = 20_000


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _body(value: object) -> str:
    """A body as the page shows it: JSON indented, anything else as recorded, cut at a size."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    try:
        text = json.dumps(json.loads(text), indent=1, ensure_ascii=False)
    except ValueError:
        pass
    note = ""
    if len(text) > MAX_BODY_CHARS:
        note = f"<p class='muted'>… {len(text) - MAX_BODY_CHARS} more characters (see {e(TRANSCRIPT)})</p>"
        text = text[:MAX_BODY_CHARS]
    return f"<pre class='wire'>{e(text)}</pre>{note}"


def _headers(value: object) -> str:
    rows = "".join(f"{e(k)}: {e(v)}\n" for k, v in _mapping(value).items())
    return f"<pre class='wire'>{rows}</pre>" if rows else ""


def _tokens(call: Mapping[str, Any]) -> str:
    tokens = _mapping(call.get("tokens"))
    if not tokens:
        return "no tokens"
    parts = [f"{e(k.replace('_', ' '))} {e(v)}" for k, v in tokens.items() if isinstance(v, int) and v]
    return ", ".join(parts) or "0 tokens"


def _summary(i: int, call: Mapping[str, Any]) -> str:
    status = call.get("status") or "no answer"
    failed = call.get("failure") or not (isinstance(status, int) and 200 <= status < 300)
    latency = call.get("seconds")
    cost = call.get("cost_usd")
    parts = [
        f"#{i}",
        f"{e(call.get('api'))} {e(call.get('kind'))}",
        f"<code>{e(call.get('model') or '?')}</code>",
        f"<span class='{'fail' if failed else 'pass'}'>{e(status)}</span>",
        f"{float(latency):.2f} s" if isinstance(latency, int | float) else "",
        _tokens(call),
        f"${float(cost):.6f}" if isinstance(cost, int | float) else "unpriced",
        f"{int(call['tries'])} tries" if isinstance(call.get("tries"), int) and call["tries"] > 1 else "",
        f"<span class='fail'>{e(call.get('failure'))}</span>" if call.get("failure") else "",
    ]
    return " · ".join(p for p in parts if p)


def _refused_html(i: int, reason: str, record: Mapping[str, Any]) -> str:
    """A call the gateway refused itself (a cost cap spent, an unpriced model under a cap): never
    forwarded, so no answer, no tokens and no cost; what it was answered and how big it was."""
    call, request, refusal = (_mapping(record.get(k)) for k in ("call", "request", "refusal"))
    summary = " · ".join(
        [
            f"#{i}",
            f"{e(call.get('api'))} {e(call.get('kind'))}",
            f"<code>{e(call.get('model') or '?')}</code>",
            f"<span class='fail'>{e(reason)}</span>",
            "refused by the gateway: 0 tokens, $0",
        ]
    )
    size = request.get("bytes")
    what = f"{e(request.get('method'))} <code>{e(request.get('path'))}</code>" if request else "the request"
    if isinstance(size, int) and not isinstance(size, bool):
        what += f" ({size} bytes)"
    out = [f"<details class='wire'><summary>{summary}</summary>"]
    out.append(f"<p class='fail'>refused by the gateway ({e(reason)}): never forwarded to the provider</p>")
    if refusal.get("message"):
        out.append(f"<p>answered {e(refusal.get('status') or '')}: {e(refusal['message'])}</p>")
    out.append(f"<p class='muted'>{what}; its body is not kept</p></details>")
    return "".join(out)


def _call_html(i: int, record: Mapping[str, Any]) -> str:
    reason = refused(record)
    if reason is not None:
        return _refused_html(i, reason, record)
    call, request, response = (_mapping(record.get(k)) for k in ("call", "request", "response"))
    query = f"?{request['query']}" if request.get("query") else ""
    out = [f"<details class='wire'><summary>{_summary(i, call)}</summary>"]
    if request:
        out.append(f"<h4>request: {e(request.get('method'))} <code>{e(request.get('path'))}{e(query)}</code></h4>")
        out.append(_headers(request.get("headers")) + _body(request.get("body", "")))
    if response:
        out.append(f"<h4>response: {e(response.get('status') or 'no answer')}</h4>")
        if response.get("error"):
            out.append(f"<p class='fail'>{e(response['error'])}</p>")
        out.append(_headers(response.get("headers")))
        if "body" in response:
            out.append(_body(response["body"]))
    out.append("</details>")
    return "".join(out)


def wire_transcript_html(rec_dir: Path) -> str:
    """The recording's wire transcript as a section, or "" when the attempt has none (its CLI
    bypasses the gateway, or a human session) or it is no regular file."""
    stats = WireStats()
    records = list(
        wire_records(rec_dir / TRANSCRIPT, max_records=MAX_READ_CALLS, max_bytes=MAX_READ_BYTES, stats=stats)
    )
    if not stats.opened:
        return ""
    refusals = sum(1 for r in records if refused(r) is not None)
    calls = [_mapping(r.get("call")) for r in records if refused(r) is None]
    answered = sum(1 for c in calls if isinstance(c.get("status"), int) and 200 <= c["status"] < 300)
    counts = f"{len(records)} calls through the model gateway, {answered} answered"
    if refusals:
        counts += f", {refusals} refused by the gateway (never forwarded)"
    out = [
        "<h3>Model calls (wire transcript)</h3>",
        f"<p class='muted'>{counts} (<code>{e(TRANSCRIPT)}</code>: credentials redacted). "
        "Open a call for its request and answer.</p>",
    ]
    out.extend(_call_html(i, r) for i, r in enumerate(records[:MAX_CALLS], start=1))
    if len(records) > MAX_CALLS:
        out.append(f"<p class='muted'>… {len(records) - MAX_CALLS} more calls (see <code>{e(TRANSCRIPT)}</code>)</p>")
    if stats.bad_lines:
        out.append(f"<p class='muted'>{stats.bad_lines} lines that are no call record were skipped.</p>")
    if stats.cut:
        out.append(
            f"<p class='muted'>The transcript is longer than the page reads ({MAX_READ_BYTES // (1024 * 1024)} MB, "
            f"{MAX_READ_CALLS} calls): the page shows its beginning (see <code>{e(TRANSCRIPT)}</code>).</p>"
        )
    return "".join(out)
