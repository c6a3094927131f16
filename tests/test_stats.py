"""The statistics of bridge/reports/stats.py against hand-computed values, and where they show:
the leaderboard line, `report --json`, the terminal report and the HTML report."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from math import comb
from pathlib import Path
from typing import Any

import pytest

from bridge.reports.stats import (
    bootstrap_interval,
    paired_difference,
    pass_at_k_all,
    per_task_pass_at_1,
    run_stats,
)
from bridge.sessions.attempts import pass_at_k


def row(task: str, attempt: int, passed: int, total: int = 4, *, dsr: bool = True, ac: int = 2) -> dict[str, Any]:
    prof = {
        "outcome": "scored" if dsr else "deploy_failed",
        "pass_at_1": {"passed": passed, "total": total, "score": passed / total},
        "dsr": {"success": dsr},
        "api_coverage": {"implemented_apis": ac, "total_apis": 4, "score": ac / 4},
    }
    return {
        "repo_name": task,
        "lang": "python",
        "attempt": attempt,
        "outcome": prof["outcome"],
        **prof,
        "rgbridge": {"profiles": {"strict": dict(prof), "compat": dict(prof)}},
    }


#: task a solved 1 of 3, b 0 of 3, c 2 of 3; an agent_error row counts nowhere
FIXTURE = [
    row("a", 1, 4),
    row("a", 2, 2),
    row("a", 3, 0, dsr=False, ac=0),
    row("b", 1, 1),
    row("b", 2, 1),
    row("b", 3, 3),
    row("c", 1, 4),
    row("c", 2, 4),
    row("c", 3, 2),
    {"repo_name": "b", "lang": "python", "attempt": 4, "outcome": "agent_error", "agent_error": {"class": "auth"}},
]


def test_pass_at_k_matches_hand_computed_values() -> None:
    st = run_stats(FIXTURE, "strict")
    # a: 1 - C(2,k)/C(3,k) = 1/3, 2/3, 1; b: 0; c: 2/3, 1 (n-c=1 < 2), 1
    assert st.pass_at_k == pytest.approx({1: (1 / 3 + 0 + 2 / 3) / 3, 2: (2 / 3 + 0 + 1) / 3, 3: 2 / 3})
    assert st.tasks == 3 and st.attempts_per_task == 3
    # Pass@1 (the test pass rate): a (1 + .5 + 0)/3, b (.25+.25+.75)/3, c (1+1+.5)/3
    assert st.pass_at_1 is not None and st.pass_at_1.mean == pytest.approx((0.5 + 5 / 12 + 5 / 6) / 3)
    assert st.dsr is not None and st.dsr.mean == pytest.approx((2 / 3 + 1 + 1) / 3)
    assert st.ac is not None and st.ac.mean == pytest.approx((1 / 3 + 0.5 + 0.5) / 3)
    assert st.pass_at_1.low <= st.pass_at_1.mean <= st.pass_at_1.high


def test_product_form_equals_the_binomial_form_for_large_n() -> None:
    for n, c, k in [(1000, 10, 100), (200, 0, 7), (200, 199, 1), (50, 25, 50), (7, 3, 2)]:
        exact = 1 - Fraction(comb(n - c, k), comb(n, k))
        assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)
    # tasks count for the k their attempts reach
    assert pass_at_k_all({"x": [True], "y": [False, False]}) == {1: 0.5, 2: 0.0}


def test_bootstrap_is_seeded_and_degenerate_data_has_no_width() -> None:
    values = [(i * 0.37) % 1 for i in range(20)]
    one, two = bootstrap_interval(values, seed=7), bootstrap_interval(values, seed=7)
    other = bootstrap_interval(values, seed=8)
    assert one == two and one is not None and other is not None and (one.low, one.high) != (other.low, other.high)
    assert one.low < one.mean < one.high and 0.0 <= one.low and one.high <= 1.0
    flat = bootstrap_interval([0.4] * 6)
    assert flat is not None and flat.low == pytest.approx(0.4) and flat.high == pytest.approx(0.4)
    assert bootstrap_interval([]) is None


def _exact_sign_flip_p(diffs: list[float]) -> float:
    observed = abs(sum(diffs) / len(diffs))
    flips = list(itertools.product((1, -1), repeat=len(diffs)))
    hits = sum(
        abs(sum(s * d for s, d in zip(signs, diffs, strict=True)) / len(diffs)) >= observed - 1e-12 for signs in flips
    )
    return hits / len(flips)


def test_paired_difference_interval_and_p_value() -> None:
    b = {f"t{i}": 0.2 + 0.05 * i for i in range(8)}
    a = {t: v + (0.3 if i % 4 else -0.1) for i, (t, v) in enumerate(b.items())}
    a["only-in-a"] = 1.0  # not a common task: left out
    diff = paired_difference(a, b, seed=3, resamples=4000)
    assert diff is not None and diff.tasks == 8
    diffs = [a[t] - b[t] for t in b]
    assert diff.difference == pytest.approx(sum(diffs) / 8)
    assert diff.low <= diff.difference <= diff.high
    assert diff.p_value == pytest.approx(_exact_sign_flip_p(diffs))  # 8 tasks: every sign pattern
    many_b = {f"t{i}": 0.01 * i for i in range(30)}
    many_a = {t: v + (0.2 if i % 3 else -0.1) for i, (t, v) in enumerate(many_b.items())}
    sampled = paired_difference(many_a, many_b, seed=3)  # 30 tasks: random sign patterns
    assert sampled is not None and 0 < sampled.p_value < 0.01 and sampled.difference == pytest.approx(0.1)
    same = paired_difference(b, b)
    assert same is not None and same.difference == 0.0 and same.p_value == 1.0
    assert paired_difference({"x": 1.0}, {"y": 1.0}) is None
    assert per_task_pass_at_1(FIXTURE, "strict")["b"] == pytest.approx(5 / 12)


def _run_folder(tmp_path: Path) -> Path:
    from bridge.reports.runreport import report_from_entries

    out = tmp_path / "run"
    out.mkdir()
    meta = {"agent": {"name": "claude-code", "version": "2.0"}, "attempts": 3, "run_id": "r1"}
    (out / "report_r1.json").write_text(json.dumps(report_from_entries(FIXTURE, meta)))
    return out


def test_report_terminal_json_html_carry_pass_at_k_and_intervals(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    from bridge.cli import main
    from bridge.reports.html import render_html

    run = _run_folder(tmp_path)
    assert main(["report", str(run), "--json", "--seed", "5"]) == 0
    data = json.loads(capsys.readouterr().out)
    strict = data["statistics"]["strict"]
    assert strict["pass_at_k"] == {"1": 0.3333, "2": 0.5556, "3": 0.6667}
    assert strict["seed"] == 5 and "bootstrap" in strict["method"]
    assert strict["pass_at_1"]["low"] <= strict["pass_at_1"]["mean"] <= strict["pass_at_1"]["high"]
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "Pass@1 0.3333 Pass@2 0.5556 Pass@3 0.6667" in out and "95% percentile bootstrap over tasks" in out
    page = render_html(run)
    assert "<h2>Statistics</h2>" in page and "Pass@1 [95% CI]" in page and "0.5556" in page


def test_few_values_enumerate_the_bootstrap_distribution(monkeypatch: Any) -> None:
    """Up to EXACT_UP_TO values every resample is weighed (no seed needed); it agrees with the
    sampled bootstrap of many resamples."""
    from bridge.reports import stats

    values = [0.1, 0.5, 0.9, 1.0, 0.0]
    exact = bootstrap_interval(values, seed=1)
    assert exact == bootstrap_interval(values, seed=2)  # the seed plays no part
    monkeypatch.setattr(stats, "EXACT_UP_TO", 0)
    sampled = bootstrap_interval(values, seed=1, resamples=100_000)
    assert exact is not None and sampled is not None
    assert exact.low == pytest.approx(sampled.low, abs=0.02) and exact.high == pytest.approx(sampled.high, abs=0.02)
