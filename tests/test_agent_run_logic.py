"""Pure logic of agent runs that only the Docker and Ray lanes reached before (issue 37): the
Ray nodes' fact checks (bridge/agents/ray/checks.py) and where an attempt's time went
(bridge/agents/attempt/timing.py). Version matching is in tests/test_agent_adapters.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bridge.agents.attempt.timing import overlap, scoring_span, scoring_window
from bridge.agents.ray.checks import facts_checks, failed


def node(
    name: str, *, version: str = "2.1.0", keys: bool = True, engine: bool = True, box: bool = True
) -> dict[str, Any]:
    return {
        "node": name,
        "engine": {"ok": engine, "detail": "engine 27.0" if engine else "no engine"},
        "cli": {"codex": {"version": version, "binary": "/usr/bin/codex"}},
        "keys": {"codex": {"OPENAI_API_KEY": keys}},
        "sandbox": {"ok": box, "detail": "bwrap 0.9" if box else "bubblewrap (bwrap) is not installed"},
        "bridge_version": "0.4.0",
    }


def by_name(checks: list[Any]) -> dict[str, Any]:
    return {c.name: c for c in checks}


def test_healthy_nodes_pass_every_check() -> None:
    checks = facts_checks([node("a"), node("b")], ["codex"], required=True, driver_version="2.1.0")
    assert checks and not failed(checks)
    assert by_name(checks)["codex version"].detail == "2.1.0 on every node"


def test_each_failing_fact_is_named_after_its_node() -> None:
    facts = [node("a", engine=False), node("b", keys=False), node("c", box=False)]
    bad = {c.name: c for c in failed(facts_checks(facts, ["codex"], required=True))}
    assert set(bad) == {"a engine", "b keys", "c sandbox"}
    assert "none of OPENAI_API_KEY" in bad["b keys"].detail and bad["b keys"].fix
    assert "bubblewrap" in bad["c sandbox"].detail


def test_versions_differing_between_nodes_or_from_the_driver_refuse_a_run() -> None:
    split = facts_checks([node("a"), node("b", version="2.2.0")], ["codex"], required=True)
    [version] = [c for c in failed(split) if c.name == "codex version"]
    assert "2.1.0 on a; 2.2.0 on b" in version.detail
    driver = facts_checks([node("a")], ["codex"], required=True, driver_version="2.0.0")
    assert "2.0.0 on the driver; 2.1.0 on a" in by_name(failed(driver))["codex version"].detail
    # doctor without --agent: the same facts are warnings, not errors
    looked = facts_checks([node("a"), node("b", version="2.2.0")], ["codex"], required=False)
    assert by_name(looked)["codex version"].severity == "warning" and not failed(looked)


def test_keys_are_not_required_with_an_endpoint_of_the_users_and_lost_nodes_are_reported() -> None:
    own_endpoint = facts_checks([node("a", keys=False)], ["codex"], required=True, keys_required=False)
    assert not failed(own_endpoint) and by_name(own_endpoint)["a keys"].severity == "warning"
    facts = [node("a"), {"node": "b", "unreachable": "timed out"}, {"node": "c", "gone": "node died"}]
    checks = by_name(facts_checks(facts, ["codex"], required=True))
    assert not checks["node b"].ok and checks["node c"].ok and checks["node c"].severity == "warning"
    assert not facts_checks([], ["codex"], required=True)[0].ok  # no node offers the resource
    missing = node("a")
    missing["cli"]["codex"] = {"error": "no binary found"}
    assert by_name(failed(facts_checks([missing], ["codex"], required=True)))["a codex"].fix


def _recording(folder: Path, events: list[tuple[str, str]]) -> Path:
    folder.mkdir()
    (folder / "events.jsonl").write_text("".join(json.dumps({"type": kind, "t": at}) + "\n" for kind, at in events))
    return folder


def test_the_scoring_window_runs_from_the_first_submit_to_the_last_score(tmp_path: Path) -> None:
    rec = _recording(
        tmp_path / "r",
        [
            ("start", "2026-01-01T00:00:00Z"),
            ("submit", "2026-01-01T00:00:10Z"),
            ("score", "2026-01-01T00:00:20Z"),
            ("submit", "2026-01-01T00:00:30Z"),  # a second submit does not move the start
            ("score_failed", "2026-01-01T00:00:42.5Z"),
        ],
    )
    start, end = scoring_window(rec)  # type: ignore[misc]
    assert end - start == pytest.approx(32.5) and scoring_span(rec) == 32.5
    assert scoring_window(_recording(tmp_path / "none", [("submit", "2026-01-01T00:00:10Z")])) is None
    assert scoring_window(tmp_path / "missing") is None
    bad = _recording(tmp_path / "bad", [("submit", "not a time"), ("score", "2026-01-01T00:00:20Z")])
    assert scoring_window(bad) is None  # no readable submit: no window


@pytest.mark.parametrize(
    ("agent", "scoring", "expected"),
    [
        ((0.0, 10.0), (5.0, 15.0), 5.0),  # the agent waited for its own score
        ((0.0, 10.0), (10.0, 20.0), 0.0),  # scored after the agent ended
        ((0.0, 10.0), (12.0, 20.0), 0.0),
        ((5.0, 8.0), (0.0, 20.0), 3.0),  # inside the window
        ((0.0, 10.0), None, 0.0),  # never scored
    ],
)
def test_overlap_of_the_agents_run_and_the_scoring(
    agent: tuple[float, float], scoring: tuple[float, float] | None, expected: float
) -> None:
    assert overlap(agent, scoring) == expected
