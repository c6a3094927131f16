"""Java through everything Python goes through: an MCP session over stdio (seeded with README and
the pom seed, never golden tests), submission scored in both profiles, rescore of the recording,
and `evaluate` over a predictions folder with a Java repo, giving upstream's per-language summary
and leaderboard rows. Real engine, real stdio client."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, stdio_client

from bridge.recording.rescore import rescore
from bridge.reports.export import leaderboard_rows
from bridge.scoring.run.evaluate import EvaluationRequest, evaluate
from bridge.tasks.catalog import Catalog
from tests.helpers import stdio_params

pytestmark = pytest.mark.docker

TASK_ID = "link-shortener"


def _copy_tree(src: Path, dest: Path) -> None:
    for path in src.rglob("*"):
        if path.is_file():
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


@pytest.fixture(scope="module")
def session_run(docker_client, tasks_dir: Path, tmp_path_factory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("java-flow")
    ws, rec = tmp / "ws", tmp / "rec"

    async def go() -> dict[str, Any]:
        with (tmp / "server.stderr").open("w") as errlog:
            async with Client(stdio_client(stdio_params(ws, rec), errlog=errlog), mode="legacy") as c:
                tasks = (await c.call_tool("list_tasks", {})).structured_content["tasks"]
                assert any(t["id"] == TASK_ID and t["lang"] == "java" for t in tasks)
                started = (await c.call_tool("start_task", {"task_id": TASK_ID})).structured_content
                workspace = Path(started["workspace"])
                seeded = sorted(
                    p.relative_to(workspace).as_posix()
                    for p in workspace.rglob("*")
                    if p.is_file() and ".rgbridge" not in p.parts
                )
                _copy_tree(tasks_dir / TASK_ID / "solution", workspace)
                (workspace / "NOTES.md").write_text(f"run {uuid.uuid4()}\n")
                receipt = await c.call_tool("submit_task", {})
                assert not receipt.is_error, receipt.content
                status: dict[str, Any] = {}
                for _ in range(40):
                    status = (await c.call_tool("get_result", {"wait_seconds": 50})).structured_content
                    if status["state"] in ("done", "failed"):
                        break
                return {"status": status, "seeded": seeded, "rec_dir": Path(started["recording"])}

    return anyio.run(go)


def test_java_session_over_mcp_is_scored(session_run) -> None:
    assert session_run["seeded"] == ["README.md", "pom.xml"]  # the pom seed, no golden test
    status = session_run["status"]
    assert status["state"] == "done", status
    for profile in ("strict", "compat"):
        row = status["summary"][profile]
        assert row["pass_at_1"] == 1.0 and row["dsr"] is True, row


def test_java_recording_rescores(session_run, tasks_dir: Path) -> None:
    path = rescore(session_run["rec_dir"], profile="strict", catalog=Catalog.from_options(tasks_dir))
    result = json.loads(Path(path).read_text())
    strict = result["profiles"]["strict"]
    assert result["lang"] == "java" and strict["pass_at_1"]["score"] == 1.0 and strict["dsr"]["success"]


def test_evaluate_reports_java_by_language(docker_client, tasks_dir: Path, tmp_path: Path) -> None:
    catalog = Catalog.from_options(tasks_dir)
    preds = tmp_path / "preds"
    _copy_tree(tasks_dir / TASK_ID / "solution", preds / TASK_ID)
    (preds / TASK_ID / "NOTES.md").write_text(f"{uuid.uuid4()}\n")  # a fresh snapshot: really scored
    report_path, _, _ = evaluate(
        catalog, EvaluationRequest(predictions_dir=preds, output_dir=tmp_path / "out", profile="both")
    )
    report = json.loads(report_path.read_text())
    s = report["summary"]
    assert s["java_repos"] == 1 and s["python_repos"] == 0
    assert s["pass_at_1_by_lang"]["java"] == 1.0 and s["dsr_by_lang"]["java"] == 1.0
    rows = leaderboard_rows(report, ide="cursor", model="m")
    assert [r["language"] for r in rows] == ["Java"] and rows[0]["pass_at_1"] == 100.0
    strict_rows = leaderboard_rows(report, ide="cursor", model="m", aggregation="strict")
    assert strict_rows[0]["pass_at_1"] == 100.0 and strict_rows[0]["dsr"] == 100.0


def test_java_practice_check_deploys_without_golden_files(docker_client, tasks_dir: Path, tmp_path: Path) -> None:
    from bridge.scoring.run.engine import deploy_check

    task = Catalog.from_options(tasks_dir).get(TASK_ID)
    result = deploy_check(task, task.solution_dir, output_dir=tmp_path, client=docker_client)
    assert result.outcome == "scored" and result.dsr.success, (result.outcome, result.dsr.message, result.error)
    assert result.pass_at_1.total == 0 and result.tests == []  # deploy-only: no golden test involved
