"""`rgbridge view` over two runs of the real Claude Code (issue 40, done-when): the scripted model
on loopback, kv-ledger and word-duel, 2 attempts each; the second run's kv-ledger solution is
flawed (one route renamed, so its history tests fail). One module-scoped fixture makes both runs;
every test here reads them: the JSON API and the four pages in headless Chromium, the compare
page's paired numbers, and the exported bundle opened from disk."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.cli import main as rgbridge
from bridge.reports.stats import paired_difference, per_task_pass_at_1
from bridge.view.catalog import discover
from tests.helpers import SECRET, report_of
from tests.scripted_model import ScriptedModel, by_task_policy, read_solution
from tests.view_runs import Served, all_cells, client, dom, table_cells

REPO_ROOT = Path(__file__).resolve().parent.parent
TASKS = ("kv-ledger", "word-duel")
ROUTE = '@app.get("/api/v1/keys/{key}/history")'


def _run(out: Path, run_id: str, solutions: dict[str, dict[str, str]] | None) -> None:
    with ScriptedModel(by_task_policy(solutions=solutions)) as model:
        code = rgbridge(
            ["run", "--agent", "claude-code", "--tasks", *TASKS, "--attempts", "2", "--workers", "2"]
            + ["--time-limit", "300", "--model", "scripted-model", "--model-base-url", model.base_url]
            + ["--output-dir", str(out), "--run-id", run_id]
        )
        assert not model.errors, model.errors
    assert code == 0, (out / "run.json").read_text()


@pytest.fixture(scope="module")
def real_runs(
    docker_client: Any, agent_cli: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    agent_cli("claude")  # skips (or fails under RGBRIDGE_REQUIRE_AGENT_CLIS=1) without the binary
    base = tmp_path_factory.mktemp("view-real")
    flawed = read_solution(REPO_ROOT / "tasks" / "kv-ledger")
    assert ROUTE in flawed["app.py"]
    flawed["app.py"] = flawed["app.py"].replace(ROUTE, '@app.get("/api/v1/keys/{key}/log")')
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANTHROPIC_API_KEY", SECRET)
        for var in ("ANTHROPIC_BASE_URL", "RGBRIDGE_TOKEN"):
            mp.delenv(var, raising=False)
        _run(base / "good", "good-run", None)
        _run(base / "flawed", "flawed-run", {"kv-ledger": flawed})
    catalog = discover([base / "good", base / "flawed"])
    ids = {i.path.name: i.id for i in catalog.items}
    yield {"base": base, "catalog": catalog, "ids": ids}


def test_real_runs_api_serves_runs_run_attempt_compare(real_runs: dict[str, Any]) -> None:
    c, ids = client(real_runs["catalog"]), real_runs["ids"]
    listed = {r["name"]: r for r in c.get("/api/runs").json()}
    assert listed["good"]["agent"] == "claude-code" and listed["good"]["model"] == "scripted-model"
    assert listed["good"]["statistics"]["strict"]["pass_at_k"] == {"1": 1.0, "2": 1.0}
    assert listed["flawed"]["statistics"]["strict"]["pass_at_1"]["mean"] < 1.0
    run = c.get(f"/api/runs/{ids['flawed']}").json()
    assert run["counts"]["scored"] == 4 and not run["going"]
    one = c.get(f"/api/runs/{ids['flawed']}/attempts/kv-ledger.a1").json()
    calls = [call["name"] for s in one["steps"] for call in s["calls"]]
    assert "mcp__rgbridge__submit_task" in calls and "Write" in calls
    assert any(f["path"] == "app.py" and f["diff"] and "/log" in f["diff"] for f in one["files"])
    tests = json.dumps(one["entry"]["rgbridge"]["profiles"]["strict"])
    assert "history" in tests and one["row"]["pass_at_1"] < 1.0
    assert c.get(f"/api/runs/{ids['flawed']}/attempts/kv-ledger.a1/files/agent/trajectory.json").status_code == 200
    both = c.get("/api/compare", params=[("run", ids["good"]), ("run", ids["flawed"])]).json()
    reports = [report_of(real_runs["base"] / n)["results"] for n in ("good", "flawed")]
    want = paired_difference(per_task_pass_at_1(reports[1], "strict"), per_task_pass_at_1(reports[0], "strict"))
    (pair,) = both["paired"]
    assert want is not None and want.difference < 0 and pair["difference"] == pytest.approx(want.difference)
    assert pair["p_value"] == pytest.approx(want.p_value)
    assert {"run": ids["good"], "not": ids["flawed"], "tasks": ["kv-ledger"]} in both["solved_by_one_not_other"]


def test_real_runs_pages_in_chromium(real_runs: dict[str, Any], chromium: str, tmp_path: Path) -> None:
    ids, profile = real_runs["ids"], tmp_path / "profile"
    profile.mkdir()
    with Served(real_runs["catalog"]) as srv:
        runs = dom(chromium, profile, srv.url("/"), budget_ms=2000)
        run = dom(chromium, profile, srv.url(f"/runs/{ids['flawed']}"), budget_ms=2000)
        attempt = dom(chromium, profile, srv.url(f"/runs/{ids['flawed']}/attempts/kv-ledger.a1"), budget_ms=2000)
        compare = dom(chromium, profile, srv.url(f"/compare?run={ids['good']}&run={ids['flawed']}"), budget_ms=2000)
    assert "<title>Runs</title>" in runs and "flawed" in runs and "<svg" in runs
    rows = {cells[0]: cells for cells in table_cells(run, "attempts")}
    assert sorted(rows) == [f"{t}.a{k}" for t in TASKS for k in (1, 2)]
    assert all(r[1] == "scored" for r in rows.values()) and not rows["kv-ledger.a1"][4].startswith("35/35")
    assert "mcp__rgbridge__submit_task" in attempt and "Tests at submit" in attempt and "<svg" in attempt
    cells = all_cells(compare)
    reports = [report_of(real_runs["base"] / n)["results"] for n in ("good", "flawed")]
    want = paired_difference(per_task_pass_at_1(reports[1], "strict"), per_task_pass_at_1(reports[0], "strict"))
    assert want is not None
    assert f"{want.difference:+.4f}" in cells and f"{want.p_value:.4f}" in cells
    assert f"[{want.low:+.4f}, {want.high:+.4f}]" in cells


def test_real_runs_export_opens_from_disk(real_runs: dict[str, Any], chromium: str, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    assert rgbridge(["view", *(str(real_runs["base"] / n) for n in ("good", "flawed")), "--export", str(out)]) == 0
    profile = tmp_path / "profile"
    profile.mkdir()
    c, ids = client(real_runs["catalog"]), real_runs["ids"]
    for served, name in [
        ("/", "index.html"),
        (f"/runs/{ids['flawed']}", f"run-{ids['flawed']}.html"),
        (f"/runs/{ids['flawed']}/attempts/kv-ledger.a1", f"attempt-{ids['flawed']}--kv-ledger.a1.html"),
    ]:
        assert all_cells(dom(chromium, profile, (out / name).as_uri())) == all_cells(c.get(served).text), name
    assert "paired" in (out / "compare.html").read_text()
