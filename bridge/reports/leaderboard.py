"""The leaderboard line of an agent run's report (`rgbridge report OUT` after `rgbridge run`):
agent and model (and `unconfined` when the agent ran without a sandbox), then per language
Pass@1 / AC / DSR under both profiles, Pass@k when the run made several attempts per task, the
statistics (Pass@k for every k, 95% bootstrap intervals: bridge/reports/stats.py), the
errored attempts (agent failures: recorded, not scored as the agent's work, not in the means) and
the contaminated attempts, counted and flagged."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.scoring.run.reporting import LANGS, is_agent_error, profile_rows, summarize_strict, summarize_upstream
from bridge.sessions.attempts import pass_at_k, solved


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def attempt_key(entry: Mapping[str, Any]) -> str:
    """`<task>.a<k>`, as the run names an attempt (bridge/agents/attempt/lifecycle.py)."""
    attempt = entry.get("attempt")
    number = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 1
    return f"{entry.get('repo_name')}.a{number}"


def agent_error_class(entry: Mapping[str, Any]) -> str | None:
    """The error class of an attempt the agent failed (outcome `agent_error`), else None."""
    if not is_agent_error(entry):
        return None
    return str(_mapping(entry.get("agent_error")).get("class") or "unknown")[:60]


def is_unconfined(meta: Mapping[str, Any], results: Sequence[Mapping[str, Any]] = ()) -> bool:
    """The run (or one of its attempts) ran the agent without a sandbox (`--sandbox none`)."""
    config = _mapping(meta.get("config"))
    if meta.get("unconfined") is True or meta.get("sandbox") == "none" or config.get("sandbox") == "none":
        return True
    for r in results:
        box = _mapping(_mapping(r.get("run")).get("sandbox"))
        if box.get("kind") == "none" or box.get("confined") is False:
            return True
    return False


def errored_attempts(meta: Mapping[str, Any], results: Sequence[Mapping[str, Any]]) -> list[str]:
    """`<task>.a<k> (class)` of every attempt the agent failed: its rows, and the keys the run's
    metadata lists (`errored_attempts`) that have no row."""
    named = {attempt_key(r): f"{attempt_key(r)} ({agent_error_class(r)})" for r in results if agent_error_class(r)}
    listed = meta.get("errored_attempts")
    for key in listed if isinstance(listed, list) else []:
        if isinstance(key, str) and key[:200] not in named:
            named[key[:200]] = key[:200]
    return [named[k] for k in sorted(named)]


def _solved(entry: Mapping[str, Any], profile: str) -> bool:
    prof = ((entry.get("rgbridge") or {}).get("profiles") or {}).get(profile) or {}
    return bool(solved({profile: prof.get("pass_at_1") or {}}, profile))


def pass_at_k_by_lang(results: Sequence[Mapping[str, Any]], profile: str, k: int) -> dict[str, float]:
    """Mean over tasks of the unbiased Pass@k (bridge/sessions/attempts.py) of each language."""
    out: dict[str, float] = {}
    for lang in LANGS:
        groups: dict[str, list[bool]] = {}
        for e in results:
            if e.get("lang") == lang and not is_agent_error(e):
                groups.setdefault(str(e.get("repo_name")), []).append(_solved(e, profile))
        values = [pass_at_k(len(v), sum(v), k) for v in groups.values() if len(v) >= k]
        if values:
            out[lang] = round(sum(values) / len(values), 4)
    return out


def leaderboard_lines(report: Mapping[str, Any], *, seed: int = 0) -> list[str]:
    """The leaderboard line, per-language means, then the statistics of bridge/reports/stats.py
    (Pass@k for every k, 95% intervals; `seed` seeds the bootstrap)."""
    # A report is a file on disk (untrusted): fields of the wrong shape read as absent.
    meta = _mapping(report.get("metadata"))
    raw_agent = meta.get("agent")
    agent = _mapping(raw_agent) or ({"name": raw_agent} if isinstance(raw_agent, str) else {})
    every = [r for r in report.get("results") or [] if isinstance(r, Mapping)]
    errored = errored_attempts(meta, every)
    results = [r for r in every if agent_error_class(r) is None]  # the means are over scored attempts
    models = sorted({str(_mapping(r.get("agent")).get("model") or "") for r in results} - {""})
    raw_attempts = meta.get("attempts")
    attempts = raw_attempts if isinstance(raw_attempts, int) and raw_attempts > 0 else 1
    head = (
        f"{agent.get('name', '?')} {agent.get('version', '')} + {', '.join(models) or agent.get('model') or '?'}"
        f"  ({len(every)} attempts, {attempts} per task; bridge {meta.get('bridge_version', '?')})"
    )
    if is_unconfined(meta, every):
        head += "  unconfined (no sandbox)"
    lines = [head]
    up = summarize_upstream(profile_rows(results, "compat"))
    st = summarize_strict(profile_rows(results, "strict"))
    for lang in LANGS:
        if not any(r.get("lang") == lang and not is_agent_error(r) for r in results):
            continue
        by = st["by_lang"][lang]
        text = (
            f"  {lang}: compat Pass@1 {up.get('pass_at_1_by_lang', {}).get(lang, 0.0):.4f}"
            f" AC {up.get('ac_by_lang', {}).get(lang, 0.0):.4f} DSR {up.get('dsr_by_lang', {}).get(lang, 0.0):.4f}"
            f" | strict Pass@1 {by['avg_pass_at_1']:.4f} AC {by['avg_api_coverage'] or 0.0:.4f}"
            f" DSR {by['deployment_success_rate']:.4f}"
        )
        if attempts > 1:
            for profile in ("compat", "strict"):
                ks = pass_at_k_by_lang(results, profile, attempts)
                if lang in ks:
                    text += f" | {profile} Pass@{attempts} {ks[lang]:.4f}"
        lines.append(text)
    from bridge.reports.stats import stats_lines
    from bridge.reports.stats_sections import all_stats

    for stat in all_stats(report, seed=seed):
        lines.extend(stats_lines(stat))
    if errored:
        lines.append(
            f"  ERRORED attempts ({len(errored)}; agent failures, not scored, not in the means): {', '.join(errored)}"
        )
    dirty = sorted(f"{r.get('repo_name')}.a{r.get('attempt')}" for r in results if r.get("contaminated"))
    if dirty:
        lines.append(f"  CONTAMINATED attempts ({len(dirty)}; golden files opened): {', '.join(dirty)}")
    return lines
