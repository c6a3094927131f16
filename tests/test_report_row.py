"""The report row model (bridge/scoring/run/report_row.py): the rows `build_entry` and an agent
run's attempt build are the same JSON, byte for byte, as the dict-built rows before the model
(tests/fixtures/report_rows/, written by the dict-built code), and older rows load unchanged."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from bridge.agents.adapters.events import Call, ParsedRun, Step
from bridge.agents.adapters.failures import Failure
from bridge.agents.attempt.lifecycle import Attempt
from bridge.agents.attempt.state import AttemptState
from bridge.agents.run.retries import row_cost, set_aside
from bridge.scoring.result import ScoreResult
from bridge.scoring.run.report_row import ReportRow
from bridge.scoring.run.reporting import build_entry
from bridge.sessions.models import ResultStatus

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "recordings" / "samples" / "kv-ledger-sample"
GOLDEN = Path(__file__).parent / "fixtures" / "report_rows"
NOW = 1764970100.0
REGENERATE = os.environ.get("RGBRIDGE_REGENERATE_ROWS") == "1"  # only to record the dict-built rows


def _sample() -> ScoreResult:
    path = next((SAMPLE / "results").glob("submission-*/result.json"))
    return ScoreResult.model_validate_json(path.read_text())


def _attempt(tmp: Path, *, server_lost: str | None = None) -> Attempt:
    """An attempt whose agent ended (its state on disk), without running anything."""
    attempt = Attempt.__new__(Attempt)
    prompt = SimpleNamespace(digest="p" * 64)
    attempt.settings = SimpleNamespace(  # type: ignore[assignment]
        adapter=SimpleNamespace(name="command"),
        agent_version="1.2.3",
        model="scripted-model",
        prompt=prompt,
        time_limit=600,
        run_config={"hash": "c" * 16},
        sandbox="none",
    )
    attempt.task = SimpleNamespace(id="kv-ledger", lang="python")  # type: ignore[assignment]
    attempt.number = 2
    attempt.door = None  # no model gateway: the row says what the CLI reported
    attempt.dir = tmp / "out" / "attempts" / "kv-ledger" / "a2"
    attempt.rec_dir = tmp / "recordings" / "run1" / "kv-ledger" / "a2"
    attempt.dir.mkdir(parents=True)
    AttemptState(
        phase="submitted",
        started_at=NOW - 100.0,
        session_id="sess-1",
        ended="time_limit",
        exit_code=None,
        agent_seconds=60.5,
        agent_ended_at=NOW - 30.0,
        sandbox={"kind": "bwrap", "version": "0.9.0", "confined": True, "limits": {}},
        submitted_by="time_limit",
        server_lost=server_lost,
    ).save(attempt.dir / "state.json")
    return attempt


def _parsed() -> ParsedRun:
    step = Step(source="agent", message="done", calls=[Call(call_id="c1", name="Write", arguments={})])
    return ParsedRun(
        steps=[Step(source="user", message="solve"), step],
        model="scripted-model-1",
        prompt_tokens=1200,
        completion_tokens=300,
        cached_tokens=200,
        cost_usd=0.0125,
        errors=["rate limited once"],
    )


def _rows(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    monkeypatch.setattr(time, "time", lambda: NOW)
    sample = _sample()
    done = ResultStatus(session_id="sess-1", state="done", result=sample.model_dump(mode="json"), contaminated=True)
    failed = ResultStatus(session_id="sess-1", state="failed", message="the engine went away")
    errored = ResultStatus(session_id="sess-1", state="not_submitted")
    failure = Failure("cli_crash", "killed by signal 9")
    return {
        "build_entry": build_entry(sample),
        "build_entry_strict": build_entry(sample, "strict"),
        "agent_scored": _attempt(tmp / "s")._entry(done, _parsed(), "time_limit", 12.25).to_json(),
        "agent_infra_error": _attempt(tmp / "i", server_lost="the server exited (1)")
        ._entry(failed, _parsed(), "agent", 3)
        .to_json(),
        "agent_error": _attempt(tmp / "e")._entry(errored, _parsed(), "agent_error", 0.0, failure).to_json(),
    }


def _text(row: dict[str, Any], tmp: Path) -> str:
    return json.dumps(row, indent=2).replace(str(tmp), "<tmp>")


def test_rows_are_the_json_of_the_dict_built_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _rows(tmp_path, monkeypatch)
    assert len(rows) == len(list(GOLDEN.glob("*.json"))) == 5
    for name, row in rows.items():
        path = GOLDEN / f"{name}.json"
        if REGENERATE:
            path.write_text(_text(row, tmp_path) + "\n")
        assert _text(row, tmp_path) + "\n" == path.read_text(), name  # same keys, order and values


def test_golden_rows_load_and_serialise_unchanged() -> None:
    paths = sorted(GOLDEN.glob("*.json"))
    assert len(paths) == 5
    for path in paths:
        data = json.loads(path.read_text())
        assert json.dumps(ReportRow.model_validate(data).to_json()) == json.dumps(data), path.name


def test_an_upstream_row_keeps_its_fields_and_order() -> None:
    upstream = {
        "repo_name": "kv-ledger",
        "lang": "python",
        "port": 8000,
        "exit_code": 0,
        "dsr": {"success": True},
        "pass_at_1": {"score": 0.5, "passed": 1, "total": 2},
        "elapsed_seconds": 12,
        "some_future_field": [1],
    }
    row = ReportRow.model_validate(upstream)
    assert list(row.to_json()) == list(upstream) and row.to_json() == upstream
    assert row.model_extra is not None and row.model_extra["elapsed_seconds"] == 12  # not 12.0


def test_the_typed_parts_are_checked() -> None:
    with pytest.raises(ValidationError):
        ReportRow.model_validate({"repo_name": "x", "lang": "python", "attempt": "first"})
    with pytest.raises(ValidationError):
        ReportRow.model_validate({"repo_name": "x", "lang": "python", "run": {"session_id": "s"}})


def test_a_retried_attempt_s_row_keeps_the_json_of_its_tries(tmp_path: Path) -> None:
    """The run adds its retries to the typed row (runner.one): the failure's class is written
    under `class`, each set-aside try with what it cost and where its folders went."""
    attempt = _attempt(tmp_path / "r")
    errored = ResultStatus(session_id="sess-1", state="not_submitted")
    row = attempt._entry(errored, _parsed(), "agent_error", 0.0, Failure("rate_limit", "429 from the API"))
    (attempt.dir / "agent").mkdir(parents=True, exist_ok=True)
    tried = set_aside(attempt, row, 1)
    assert not attempt.dir.exists() and Path(str(tried.attempt)).name == "a2.agent-error-1"
    assert row.run is not None and row.agent_error is not None
    row.run.retries, row.run.retried = 1, [tried, tried]
    row.agent_error.retries = 1
    data = json.loads(json.dumps(row.to_json()))
    assert data["agent_error"] == {"class": "rate_limit", "message": "429 from the API", "retries": 1}
    assert data["run"]["retries"] == 1 and list(data["run"])[-3:] == ["retries", "retried", "tokens_source"]
    assert data["run"]["retried"][0] == {
        "class": "rate_limit",
        "message": "429 from the API",
        "cost_usd": 0.0125,
        "tokens": row.run.tokens,
        "agent_seconds": 60.5,
        "attempt": tried.attempt,
    }
    assert row_cost(row) == pytest.approx(3 * 0.0125)  # the final try and both set aside
    again = ReportRow.model_validate(data)
    assert again.to_json() == data and row_cost(again) == row_cost(row)


def test_a_row_s_cost_ignores_what_is_no_cost() -> None:
    base = {"repo_name": "x", "lang": "python"}
    assert row_cost(ReportRow.model_validate(base)) == 0.0
    run = json.loads((GOLDEN / "agent_scored.json").read_text())["run"]
    row = ReportRow.model_validate({**base, "run": {**run, "cost_usd": None, "retried": [{"cost_usd": -1}, {}]}})
    assert row_cost(row) == 0.0
    row = ReportRow.model_validate({**base, "run": {**run, "cost_usd": 2, "retried": [{"cost_usd": 0.5}]}})
    assert row_cost(row) == 2.5
    with pytest.raises(ValidationError):  # a boolean is no cost (nor any other number of a row)
        ReportRow.model_validate({**base, "run": {**run, "cost_usd": True}})
