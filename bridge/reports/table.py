"""The terminal table of a run report's entries: compat (upstream rules) beside strict per repo,
then the means overall and per language, infra errors by reason and contaminated repos."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bridge.reports.leaderboard import agent_error_class
from bridge.scoring.run.reporting import LANGS, infer_outcome, profile_rows, summarize_strict, summarize_upstream


def _fmt_pass(p: Mapping[str, Any] | None) -> str:
    if not p:
        return "-"
    return f"{p.get('passed', 0)}/{p.get('total', 0)} ({p.get('score', 0.0):.2f})"


def _fmt_ac(ac: Mapping[str, Any] | None) -> str:
    if not ac:
        return "N/A"
    return f"{ac.get('implemented_apis', 0)}/{ac.get('total_apis', 0)} ({ac.get('score', 0.0):.2f})"


def _fmt_dsr(d: Mapping[str, Any] | None) -> str:
    if d is None:
        return "-"
    return "PASS" if d.get("success") else "FAIL"


def render_table(results: Sequence[Mapping[str, Any]], console: Any = None) -> Any:
    """A rich table of report entries: one row per repo and profile, compat (upstream rules)
    next to strict, narrow enough for an 80-column terminal.

    Prints to `console` (a rich Console) when given; returns the Table either way.
    """
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(
        title="RepoGenesis evaluation", box=box.SIMPLE_HEAD, show_lines=False, pad_edge=False, padding=(0, 1, 0, 0)
    )
    for col in ("Repo", "Profile", "Outcome", "DSR", "Pass@1", "AC", "Dyn AC"):
        table.add_column(col, overflow="fold")
    errored = [e for e in results if agent_error_class(e) is not None]
    for e in sorted(results, key=lambda r: str(r.get("repo_name", ""))):
        cls = agent_error_class(e)
        if cls is not None:  # the agent failed: recorded, not scored as its work
            name = f"{e.get('repo_name', '?')} a{e.get('attempt', '?')}"
            table.add_row(Text(name), "-", Text(f"agent_error: {cls}"), "-", "-", "-", "-", end_section=True)
            continue
        profiles = (e.get("rgbridge") or {}).get("profiles", {})
        compat = profiles.get("compat") or (e if "rgbridge" not in e else None)
        strict = profiles.get("strict")
        first = True
        for name, prof in (("compat", compat), ("strict", strict)):
            if prof is None:
                continue
            table.add_row(
                # Repo names and outcomes come from folders and reports: plain text, never markup.
                Text(str(e.get("repo_name", "?")) + (" CONTAMINATED" if e.get("contaminated") else ""))
                if first
                else "",
                name,
                Text(infer_outcome(prof) if name == "compat" else str(prof.get("outcome"))),
                _fmt_dsr(prof.get("dsr")),
                _fmt_pass(prof.get("pass_at_1")),
                _fmt_ac(prof.get("api_coverage")),
                _fmt_ac(prof.get("dynamic_api_coverage")) if name == "strict" else "-",
                end_section=name == "strict" or strict is None,
            )
            first = False
    results = [e for e in results if agent_error_class(e) is None]  # the means: scored attempts only
    up = summarize_upstream(profile_rows(results, "compat"))
    st = summarize_strict(profile_rows(results, "strict"))
    table.caption = (
        f"compat (upstream rules): Pass@1 {up['avg_pass_at_1']:.4f}  AC {up['avg_api_coverage']:.4f}  "
        f"DSR {up['deployment_success_rate']:.4f}  |  strict: Pass@1 {st['avg_pass_at_1']:.4f}  "
        f"DSR {st['deployment_success_rate']:.4f}  infra errors {st['infra_errors']}"
    )
    if st["infra_errors"]:  # not the agent's: excluded from the means, re-run by --resume
        table.caption += f" ({', '.join(f'{k} {v}' for k, v in sorted(st['infra_errors_by_reason'].items()))})"
    if errored:
        table.caption += f"\nagent errors (not scored, not in the means): {len(errored)}"
    dirty = sorted(str(e.get("repo_name", "?")) for e in results if e.get("contaminated"))
    if dirty:  # golden files opened while the session was open (bridge/sessions/contamination.py)
        table.caption += f"\ncontaminated (golden files opened during the session): {', '.join(dirty)}"
    # Per-language lines, as upstream's table ends (the leaderboard is split by language too).
    present = [lang for lang in LANGS if any(e.get("lang") == lang for e in results)]
    for lang in present:
        by = st["by_lang"][lang]
        # A strict-only run has no compat rows: its summary has no per-language blocks.
        compat = (
            f"compat Pass@1 {up['pass_at_1_by_lang'][lang]:.4f}  AC {up['ac_by_lang'][lang]:.4f}  "
            f"DSR {up['dsr_by_lang'][lang]:.4f}"
            if "pass_at_1_by_lang" in up
            else "compat -"
        )
        table.caption += (
            f"\n{lang} ({by['repos']} scored): {compat}  |  strict: Pass@1 "
            f"{by['avg_pass_at_1']:.4f}  DSR {by['deployment_success_rate']:.4f}"
        )
    if console is not None:
        console.print(table)
    return table
