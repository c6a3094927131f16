"""The statistics a paper reports about a run: Pass@k for every k up to the attempts per task
(the unbiased estimator, bridge/sessions/attempts.py), 95% bootstrap intervals over tasks for
Pass@1, AC and DSR, and for two runs on the same tasks the paired difference of Pass@1 with a
paired bootstrap interval and a sign-flip permutation p-value. Every figure names its method
and seed, so a reader can redo it.

Tasks are the unit of resampling (Chen et al. 2021 average Pass@k over problems; a percentile
bootstrap over problems gives its interval). A task's value is the mean over its scored attempts;
`agent_error` attempts are not the agent's work and count nowhere.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations_with_replacement, product
from math import factorial
from typing import Any

from bridge.scoring.run.reporting import profile_rows
from bridge.sessions.attempts import pass_at_k

#: resamples of every bootstrap and permutation test (the figures name it)
RESAMPLES = 2000
DEFAULT_SEED = 0
LEVEL = 0.95
#: up to this many values the bootstrap distribution is enumerated, not sampled
EXACT_UP_TO = 6
#: up to this many common tasks the sign-flip test weighs all 2^n sign patterns, not a sample
EXACT_FLIPS_UP_TO = 12
METHOD_CI = f"percentile bootstrap over tasks (every resample enumerated up to {EXACT_UP_TO} tasks)"
METHOD_PAIRED = (
    "paired bootstrap over common tasks (interval), paired sign-flip permutation (two-sided p; every sign "
    f"pattern up to {EXACT_FLIPS_UP_TO} tasks)"
)
METHOD_PASS_AT_K = "unbiased estimator 1 - C(n-c,k)/C(n,k), product form, mean over tasks with n >= k"


@dataclass
class TaskScores:
    """One task's values under one profile: each scored attempt's Pass@1, AC (None: no endpoints)
    and DSR, and whether it solved the task (every golden test passed)."""

    pass_at_1: list[float] = field(default_factory=list)
    ac: list[float] = field(default_factory=list)
    dsr: list[float] = field(default_factory=list)
    solved: list[bool] = field(default_factory=list)


@dataclass
class Interval:
    mean: float
    low: float
    high: float
    tasks: int


@dataclass
class RunStats:
    profile: str
    tasks: int
    attempts_per_task: int  # the fewest scored attempts of any task (Pass@k needs n >= k)
    pass_at_k: dict[int, float]
    pass_at_1: Interval | None
    ac: Interval | None
    dsr: Interval | None
    seed: int
    resamples: int
    method: str = METHOD_CI
    pass_at_k_method: str = METHOD_PASS_AT_K

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["pass_at_k"] = {str(k): round(v, 4) for k, v in self.pass_at_k.items()}
        return data


@dataclass
class PairedDiff:
    """Run A minus run B on the tasks both scored."""

    tasks: int
    difference: float
    low: float
    high: float
    p_value: float
    seed: int
    resamples: int
    method: str = METHOD_PAIRED


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def task_scores(results: Sequence[Mapping[str, Any]], profile: str) -> dict[str, TaskScores]:
    """Each task's scored attempts under `profile` (rows without that profile are left out)."""
    out: dict[str, TaskScores] = {}
    for row in profile_rows([r for r in results if isinstance(r, Mapping)], profile):
        if row.get("outcome") == "infra_error":  # the engine's fault, not the agent's (summarize_strict)
            continue
        t = out.setdefault(str(row.get("repo_name")), TaskScores())
        p1 = _mapping(row.get("pass_at_1"))
        score = _number(p1.get("score")) or 0.0
        total, passed = p1.get("total"), p1.get("passed")
        t.pass_at_1.append(score)
        t.solved.append(isinstance(total, int) and total > 0 and passed == total)
        ac = _mapping(row.get("api_coverage"))
        if isinstance(ac.get("total_apis"), int) and ac["total_apis"] > 0:
            t.ac.append(_number(ac.get("score")) or 0.0)
        dsr = _mapping(row.get("dsr"))
        t.dsr.append(1.0 if dsr.get("success") is True else 0.0)
    return out


def pass_at_k_all(solved: Mapping[str, Sequence[bool]]) -> dict[int, float]:
    """Mean over tasks of the unbiased Pass@k for every k from 1 to the most attempts of a task;
    a task counts for the k its attempts reach (n >= k)."""
    most = max((len(v) for v in solved.values()), default=0)
    out: dict[int, float] = {}
    for k in range(1, most + 1):
        values = [pass_at_k(len(v), sum(v), k) for v in solved.values() if len(v) >= k]
        if values:
            out[k] = sum(values) / len(values)
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default `linear` method)."""
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_interval(
    values: Sequence[float], *, seed: int = DEFAULT_SEED, resamples: int = RESAMPLES, level: float = LEVEL
) -> Interval | None:
    """The mean of per-task `values` and its percentile bootstrap interval (tasks resampled with
    replacement; up to EXACT_UP_TO values, the exact bootstrap distribution); None without values."""
    if not values:
        return None
    n = len(values)
    tail = (1.0 - level) / 2
    if n <= EXACT_UP_TO:
        low, high = _exact_bootstrap(values, tail)
        return Interval(_mean(values), low, high, n)
    rng = random.Random(seed)
    draws = rng.choices(values, k=n * resamples)  # one call: the draws of every resample
    means = sorted(sum(draws[i : i + n]) / n for i in range(0, n * resamples, n))
    return Interval(_mean(values), _percentile(means, tail), _percentile(means, 1.0 - tail), n)


def _exact_bootstrap(values: Sequence[float], tail: float) -> tuple[float, float]:
    """The percentile interval of the bootstrap distribution itself (every resample, weighted
    by its multinomial probability) rather than of random draws from it: few values have few
    distinct resamples (462 for 6), and the figure then needs no seed."""
    n = len(values)
    weighted = []
    for combo in combinations_with_replacement(range(n), n):
        ways = factorial(n)
        for count in Counter(combo).values():
            ways //= factorial(count)
        weighted.append((sum(values[i] for i in combo) / n, ways / n**n))
    weighted.sort()
    cumulative, low, high = 0.0, weighted[0][0], weighted[-1][0]
    found_low = False
    for mean, weight in weighted:
        cumulative += weight
        if not found_low and cumulative >= tail - 1e-12:
            low, found_low = mean, True
        if cumulative >= 1.0 - tail - 1e-12:
            high = mean
            break
    return low, high


def run_stats(
    results: Sequence[Mapping[str, Any]], profile: str, *, seed: int = DEFAULT_SEED, resamples: int = RESAMPLES
) -> RunStats:
    """Pass@k for every k and the intervals of Pass@1, AC and DSR of one run under `profile`."""
    tasks = task_scores(results, profile)
    return RunStats(
        profile=profile,
        tasks=len(tasks),
        attempts_per_task=min((len(t.solved) for t in tasks.values()), default=0),
        pass_at_k=pass_at_k_all({name: t.solved for name, t in tasks.items()}),
        pass_at_1=bootstrap_interval([_mean(t.pass_at_1) for t in tasks.values()], seed=seed, resamples=resamples),
        ac=bootstrap_interval([_mean(t.ac) for t in tasks.values() if t.ac], seed=seed, resamples=resamples),
        dsr=bootstrap_interval([_mean(t.dsr) for t in tasks.values()], seed=seed, resamples=resamples),
        seed=seed,
        resamples=resamples,
    )


def per_task_pass_at_1(results: Sequence[Mapping[str, Any]], profile: str) -> dict[str, float]:
    """Each task's mean Pass@1 over its scored attempts."""
    return {name: _mean(t.pass_at_1) for name, t in task_scores(results, profile).items()}


def paired_difference(
    a: Mapping[str, float], b: Mapping[str, float], *, seed: int = DEFAULT_SEED, resamples: int = RESAMPLES
) -> PairedDiff | None:
    """Mean of a - b over the tasks in both, with a paired bootstrap 95% interval and the
    two-sided p-value of a sign-flip permutation test (signs on each task's difference: all 2^n
    patterns up to EXACT_FLIPS_UP_TO tasks, else random ones with the observed mean counted as one,
    so p is never 0). None without common tasks."""
    common = sorted(set(a) & set(b))
    if not common:
        return None
    diffs = [a[t] - b[t] for t in common]
    ci = bootstrap_interval(diffs, seed=seed, resamples=resamples)
    assert ci is not None
    observed = abs(_mean(diffs))
    if len(diffs) <= EXACT_FLIPS_UP_TO:  # every sign pattern: the exact permutation p-value
        flips = list(product((1.0, -1.0), repeat=len(diffs)))
        hits = sum(
            abs(_mean([s * d for s, d in zip(signs, diffs, strict=True)])) >= observed - 1e-12 for signs in flips
        )
        p_value = hits / len(flips)
    else:
        rng = random.Random(seed + 1)  # its own stream: the interval's draws do not steer the test
        extreme = sum(
            abs(_mean([d if rng.random() < 0.5 else -d for d in diffs])) >= observed - 1e-12 for _ in range(resamples)
        )
        p_value = (extreme + 1) / (resamples + 1)
    return PairedDiff(
        tasks=len(common),
        difference=ci.mean,
        low=ci.low,
        high=ci.high,
        p_value=p_value,
        seed=seed,
        resamples=resamples,
    )


def interval_text(iv: Interval | None) -> str:
    """`0.5000 [0.2500, 0.7500]`, or `–` when there is nothing to estimate."""
    return "–" if iv is None else f"{iv.mean:.4f} [{iv.low:.4f}, {iv.high:.4f}]"


def stats_lines(st: RunStats) -> list[str]:
    """The statistics as text lines (the terminal report and the leaderboard line)."""
    ks = " ".join(f"Pass@{k} {v:.4f}" for k, v in st.pass_at_k.items())
    return [
        f"  {st.profile}: {st.tasks} tasks, {st.attempts_per_task}+ scored attempts each"
        f" | solved (all tests pass) {ks or 'Pass@k –'}",
        f"    Pass@1 {interval_text(st.pass_at_1)}  AC {interval_text(st.ac)}  DSR {interval_text(st.dsr)}"
        f"  (95% {st.method}, {st.resamples} resamples, seed {st.seed})",
    ]
