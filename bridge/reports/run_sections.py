"""The agent-run sections of a report page (`rgbridge run` folders): whose row it is (agent, CLI
version, model, prompt, time limit, sandbox, Pass@k, cost) and one line per attempt (outcome or
agent error class, times, tokens, cost, a link to the attempt's recording page).

A report is a file on disk: every field is read defensively. Folders written before a field
existed (sandbox, config, tokens, agent_error) still render, saying "not recorded".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.reports.leaderboard import (
    agent_error_class,
    attempt_key,
    errored_attempts,
    is_unconfined,
    network_of,
    pass_at_k_by_lang,
    tasks_scored,
)
from bridge.reports.markup import e, num, table
from bridge.scoring.run.reporting import LANGS

NOT_RECORDED = "<span class='muted'>not recorded</span>"
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def is_agent_run(report: Mapping[str, Any]) -> bool:
    """A `rgbridge run` report: its metadata names the agent, or its rows carry the run block."""
    md = _mapping(report.get("metadata"))
    return bool(md.get("agent")) or any(
        isinstance(_mapping(r).get("run"), Mapping) for r in report.get("results") or []
    )


def tokens_of(entry: Mapping[str, Any]) -> dict[str, float | None]:
    """An attempt's tokens split as input / output / cache read / cache write (`run.tokens`);
    rows written before the split carry prompt / completion / cached tokens only."""
    run = _mapping(entry.get("run"))
    split = _mapping(run.get("tokens"))
    if split:
        return {k: _number(split.get(k)) for k in TOKEN_KINDS}
    return {
        "input": _number(run.get("prompt_tokens")),
        "output": _number(run.get("completion_tokens")),
        "cache_read": _number(run.get("cached_tokens")),
        "cache_write": None,
    }


def _int(value: float | None) -> str:
    return "–" if value is None else f"{int(value):,}"


def _usd(value: object) -> str:
    v = _number(value)
    return "–" if v is None else f"${v:.4f}"


def _secs(value: object) -> str:
    v = _number(value)
    return "–" if v is None else f"{v:.1f}s"


def _sum(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def sandbox_html(md: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> str:
    """The sandbox kind with its version, and a visible badge when the agent ran unconfined."""
    config = _mapping(md.get("config"))
    kind = md.get("sandbox") or config.get("sandbox")
    if isinstance(kind, Mapping):
        kind = kind.get("kind")
    versions = sorted(
        {str(_mapping(_mapping(r.get("run")).get("sandbox")).get("version") or "") for r in results} - {""}
    )
    if is_unconfined(md, results):
        return f"{e(kind or 'none')} <span class='badge warn'>unconfined</span>"
    if not kind:
        kinds = sorted({str(_mapping(_mapping(r.get("run")).get("sandbox")).get("kind") or "") for r in results} - {""})
        if not kinds:
            return NOT_RECORDED
        kind = ", ".join(kinds)
    return f"{e(kind)}" + (f" <span class='muted'>{e(', '.join(versions))}</span>" if versions else "")


def network_html(md: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> str:
    """The `--network` mode (a badge when it was the host's), the names `allow` let through and
    every host the agents asked the proxy for, refused ones marked."""
    mode = network_of(md, results)
    if mode is None:
        return NOT_RECORDED
    html = e(mode) + (" <span class='badge warn'>shared network</span>" if mode == "host" else "")
    config = _mapping(md.get("config"))
    allowed = config.get("allow_hosts") or md.get("allow_hosts") or []
    if allowed:
        html += f" <span class='muted'>allowed: {e(', '.join(str(h) for h in allowed))}</span>"
    asked: dict[str, bool] = {}
    for r in results:
        net = _mapping(_mapping(_mapping(r.get("run")).get("sandbox")).get("network"))
        for item in net.get("hosts_asked") or []:
            if isinstance(item, Mapping) and item.get("host"):
                asked[str(item["host"])] = asked.get(str(item["host"]), False) or item.get("allowed") is True
    if asked:
        html += "<br>hosts asked for: " + ", ".join(
            e(h) if ok else f"<span class='fail'>{e(h)} (refused)</span>" for h, ok in sorted(asked.items())
        )
    elif mode == "allow":
        html += "<br>hosts asked for: none"
    return html


def wire_html(md: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> str:
    """What the model gateway saw of the run's calls (`run.wire` of each row): calls answered of
    made, the statuses, the time waited on a failing provider, the wire's failures, and what the
    run stopped for; "not recorded" for rows of CLIs that bypass the gateway or older runs."""
    wires = [_mapping(_mapping(r.get("run")).get("wire")) for r in results]
    wires = [w for w in wires if w]
    if not wires:
        return NOT_RECORDED
    statuses: dict[str, int] = {}
    for w in wires:
        for k, v in _mapping(w.get("statuses")).items():
            if isinstance(v, int) and not isinstance(v, bool):
                statuses[str(k)] = statuses.get(str(k), 0) + v
    calls = sum(int(_number(w.get("calls")) or 0) for w in wires)
    answered = sum(int(_number(w.get("answered")) or 0) for w in wires)
    waited = sum(_number(w.get("waited_seconds")) or 0.0 for w in wires)
    failures = sorted(
        {str(_mapping(r.get("agent_error")).get("class")) for r in results if _mapping(r.get("agent_error"))}
    )
    text = f"{answered} of {calls} answered · statuses " + ", ".join(f"{e(k)}×{v}" for k, v in sorted(statuses.items()))
    if waited:
        text += f" · {waited:.0f} s waited on a failing provider"
    if failures:
        text += f" · <span class='fail'>wire failures: {e(', '.join(failures))}</span>"
    stopped = _mapping(md.get("stopped_by_auth"))
    if stopped:
        text += f" · <span class='fail'>run stopped: {e(stopped.get('message'))}</span>"
    return text


def whose_row_html(report: Mapping[str, Any]) -> str:
    """Who made this row and with what: the run's configuration as the report recorded it."""
    md = _mapping(report.get("metadata"))
    results = [r for r in report.get("results") or [] if isinstance(r, Mapping)]
    raw_agent = md.get("agent")
    agent = _mapping(raw_agent) or ({"name": raw_agent} if isinstance(raw_agent, str) else {})
    config = _mapping(md.get("config"))
    reported = sorted({str(_mapping(r.get("agent")).get("model") or "") for r in results} - {""})
    requested = config.get("model") or agent.get("model")
    versions = sorted({str(_mapping(r.get("agent")).get("version") or "") for r in results} - {""})
    cli_version = config.get("cli_version") or agent.get("version") or ", ".join(versions)
    model = e(", ".join(reported)) if reported else NOT_RECORDED
    if requested and [str(requested)] != reported:
        model += f" <span class='muted'>(asked for {e(requested)})</span>"
    prompt = NOT_RECORDED
    if config.get("prompt"):
        prompt = f"{e(config.get('prompt'))}" + (
            f" <span class='muted'>template sha256 <code>{e(str(config.get('prompt_hash'))[:16])}</code></span>"
            if config.get("prompt_hash")
            else ""
        )
    limit = _number(config.get("time_limit_seconds")) or _number(md.get("time_limit_seconds"))
    raw_attempts = config.get("attempts") or md.get("attempts")
    attempts = raw_attempts if isinstance(raw_attempts, int) and not isinstance(raw_attempts, bool) else 1
    errored = [r for r in results if agent_error_class(r) is not None]
    unscored = [r for r in results if r.get("unscored")]
    cost = _number(md.get("cost_usd"))
    if cost is None:
        cost = _sum([_number(_mapping(r.get("run")).get("cost_usd")) for r in results])
    summed = _mapping(md.get("tokens"))  # the run's own sum, else ours over the rows
    tokens = (
        {k: _number(summed.get(k)) for k in TOKEN_KINDS}
        if summed
        else {k: _sum([tokens_of(r)[k] for r in results]) for k in TOKEN_KINDS}
    )
    rows = [
        ["agent", e(agent.get("name")) if agent.get("name") else NOT_RECORDED],
        ["CLI version", e(cli_version) if cli_version else NOT_RECORDED],
        ["model", model],
        ["prompt", prompt],
        ["time limit", f"{limit:.0f} s" if limit else NOT_RECORDED],
        ["attempts per task", str(attempts)],
        ["sandbox", sandbox_html(md, results)],
        ["network", network_html(md, results)],
        ["Pass@k", pass_k_html(report, attempts)],
        [
            "attempts run",
            f"{len(results)} ({len(results) - len(errored) - len(unscored)} scored"
            + (f", <span class='fail'>{len(errored)} agent error(s), not in the means</span>" if errored else "")
            + (f", <span class='fail'>{len(unscored)} without a score (not run)</span>" if unscored else "")
            + ")"
            + e(
                tasks_scored(
                    md, results, [r for r in results if agent_error_class(r) is None and not r.get("unscored")]
                )
            ),
        ],
        ["cost", _usd(cost) if cost is not None else NOT_RECORDED],
        ["model calls (wire)", wire_html(md, results)],
        [
            "tokens",
            " · ".join(f"{k.replace('_', ' ')} {_int(v)}" for k, v in tokens.items())
            if any(v is not None for v in tokens.values())
            else NOT_RECORDED,
        ],
        ["bridge version", e(config.get("bridge_version") or md.get("bridge_version") or "?")],
    ]
    listed = errored_attempts(md, results)
    if listed:
        rows.insert(10, ["errored attempts", f"<span class='fail'>{e(', '.join(listed))}</span>"])
    not_run = md.get("not_run")
    if isinstance(not_run, list) and not_run:
        rows.insert(10, ["not run", f"<span class='fail'>{e(', '.join(map(str, not_run)))}</span>"])
    if config.get("hash"):
        rows.append(["configuration hash", f"<code>{e(str(config.get('hash'))[:16])}</code>"])
    banner = ""
    if is_unconfined(md, results):
        banner = (
            "<p class='banner'><span class='badge warn'>unconfined</span> The agent ran without a sandbox "
            "(<code>--sandbox none</code>): it could reach everything its user can.</p>"
        )
    if network_of(md, results) == "host":
        banner += (
            "<p class='banner'><span class='badge warn'>shared network</span> The agent had the host's network "
            "(<code>--network host</code>): every service and host this machine reaches.</p>"
        )
    return "<h2>Whose row</h2>" + banner + table(["", ""], rows, cls="meta")


def pass_k_html(report: Mapping[str, Any], attempts: int) -> str:
    """Pass@1 per language under both profiles (means over scored attempts), and Pass@k with
    k = attempts per task when the run made several."""
    summary = _mapping(report.get("summary"))
    strict = _mapping(_mapping(report.get("strict_summary")).get("by_lang"))
    results = [r for r in report.get("results") or [] if isinstance(r, Mapping)]
    parts = []
    for lang in LANGS:
        if not any(r.get("lang") == lang for r in results):
            continue
        text = (
            f"{lang}: Pass@1 compat {num(_mapping(summary.get('pass_at_1_by_lang')).get(lang))}"
            f" strict {num(_mapping(strict.get(lang)).get('avg_pass_at_1'))}"
        )
        if attempts > 1:
            for profile in ("compat", "strict"):
                ks = pass_at_k_by_lang(results, profile, attempts)
                text += f" · Pass@{attempts} {profile} " + (
                    f"{ks[lang]:.4f}" if lang in ks else f"– (no task with {attempts} scored attempts)"
                )
        parts.append(e(text))
    return "<br>".join(parts) or NOT_RECORDED


def _outcome(entry: Mapping[str, Any]) -> str:
    if entry.get("unscored"):  # a planned attempt without a score: why (bridge/agents/planned.py)
        return (
            f"<span class='fail'>{e(entry.get('outcome') or 'not_run')}</span>"
            f"<br><span class='muted'>{e(str(entry.get('unscored'))[:300])}</span>"
        )
    cls = agent_error_class(entry)
    if cls is not None:
        err = _mapping(entry.get("agent_error"))
        retries = err.get("retries")
        return (
            f"<span class='fail'>agent_error: {e(cls)}</span>"
            + (f" <span class='muted'>after {e(retries)} retries</span>" if retries else "")
            + (f"<br><span class='muted'>{e(str(err.get('message'))[:200])}</span>" if err.get("message") else "")
        )
    profiles = _mapping(_mapping(entry.get("rgbridge")).get("profiles"))
    strict = _mapping(profiles.get("strict")).get("outcome")
    shown = e(entry.get("outcome") or "?")
    if strict and strict != entry.get("outcome"):
        shown += f" <span class='muted'>(strict {e(strict)})</span>"
    if entry.get("contaminated"):
        shown += " <span class='badge warn'>contaminated</span>"
    return shown


def _pass(entry: Mapping[str, Any]) -> str:
    profiles = _mapping(_mapping(entry.get("rgbridge")).get("profiles"))
    out = []
    for name in ("compat", "strict"):
        p1 = _mapping(_mapping(profiles.get(name)).get("pass_at_1"))
        if p1:
            out.append(f"{int(_number(p1.get('passed')) or 0)}/{int(_number(p1.get('total')) or 0)}")
    return " · ".join(out) or "–"


def attempts_html(report: Mapping[str, Any], links: Mapping[str, str] | None = None) -> str:
    """One line per attempt: outcome or error class, how it ended, times, tokens, cost, recording."""
    links = links or {}
    results = sorted(
        (r for r in report.get("results") or [] if isinstance(r, Mapping)),
        key=lambda r: (str(r.get("repo_name")), int(_number(r.get("attempt")) or 0)),
    )
    rows = []
    for r in results:
        key = attempt_key(r)
        run = _mapping(r.get("run"))
        ended = e(run.get("ended") or "–") + (f" ({e(run.get('limit'))})" if run.get("limit") else "")
        tok = tokens_of(r)
        href = links.get(key)
        if href:
            recording = f"<a href='{e(href)}'>recording</a>"
        elif run.get("recording"):
            recording = f"<code>{e(run.get('recording'))}</code>"
        else:
            recording = "–"
        sandbox = _mapping(run.get("sandbox"))
        box = e(sandbox.get("kind") or "–")
        if sandbox.get("kind") == "none" or sandbox.get("confined") is False:
            box = f"{e(sandbox.get('kind') or 'none')} <span class='badge warn'>unconfined</span>"
        mode = _mapping(sandbox.get("network")).get("mode")
        if mode:
            box += f" · {e(mode)}" + (" <span class='badge warn'>shared network</span>" if mode == "host" else "")
        rows.append(
            [
                f"<code>{e(key)}</code>",
                _outcome(r),
                _pass(r),
                ended,
                _secs(run.get("wall_seconds")),
                _secs(run.get("agent_seconds")),
                _secs(run.get("scoring_seconds")),
                _int(tok["input"]),
                _int(tok["output"]),
                _int(tok["cache_read"]),
                _int(tok["cache_write"]),
                _usd(run.get("cost_usd")),
                box,
                recording,
            ]
        )
    return (
        f"<h2>Attempts ({len(rows)})</h2><p class='muted'>Pass@1 passed/total under compat · strict. "
        "An agent error (the agent's CLI failed: auth, rate limit, provider, context, crash) is recorded "
        "but not scored as the agent's work and not counted in the means. Each recording page holds the "
        "agent's trajectory beside the file events.</p>"
        + table(
            [
                "attempt",
                "outcome",
                "Pass@1",
                "ended",
                "wall",
                "agent",
                "scoring",
                "tokens in",
                "out",
                "cache read",
                "cache write",
                "cost",
                "sandbox",
                "recording",
            ],
            rows,
            cls="attempts",
            numeric={4, 5, 6, 7, 8, 9, 10, 11},
        )
    )
