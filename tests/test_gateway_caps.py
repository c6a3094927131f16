"""The model gateway's cost caps (issue 38, item 6), over real HTTP on loopback with the scripted
provider (tests/scripted_model.py): each attempt's own cap (`--max-cost-per-attempt`), a fresh
budget per attempt, the run's prices (`--price`) before the table, and a cap over a model no
price lists, which would never be reached, refused at the pre-flight and on the wire. The real
Claude Code run of the attempt's cap is in tests/test_gateway_runs.py.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.agents.adapters.registry import adapter
from bridge.agents.gateway.door import RunGateway, check_cost_caps
from bridge.agents.gateway.ledger import CostRules
from bridge.agents.gateway.prices import Price, Prices, parse_price
from bridge.agents.gateway.rows import attempt_failure, run_fields
from bridge.agents.gateway.usage import Usage
from bridge.agents.gateway.wire_trajectory import parsed_run
from bridge.errors import BridgeError
from bridge.recording.wire_transcript import wire_records
from bridge.reports import wire_sections
from bridge.reports.html import render_html
from tests.helpers import SAMPLE, assert_no_active_content
from tests.scripted_model import Reply, ScriptedModel

KEY = "sk-ant-real-key-caps-test-41d2"
ANTHROPIC = {"anthropic-version": "2023-06-01"}


def messages(model: str) -> dict[str, Any]:
    return {"model": model, "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture()
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedModel]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with ScriptedModel(lambda conv: Reply("ok")) as model:
        yield model


def post(door: Any, model: str) -> httpx.Response:
    return httpx.post(
        door.url + "/v1/messages", headers={"x-api-key": door.token, **ANTHROPIC}, json=messages(model), timeout=30
    )


def test_each_attempt_has_its_own_cap_and_a_fresh_budget(provider: ScriptedModel, tmp_path: Path) -> None:
    rules = CostRules(attempt_cap=1e-7)
    with RunGateway(provider.base_url, rules=rules) as gw:
        first = gw.open("kv-ledger.a1", time_limit=60, folder=tmp_path / "a1", needs_bridge_tools=False)
        answers = [post(first, "claude-sonnet-4-5") for _ in range(3)]
        # the first answer spends the attempt's cap; the next call is refused before it leaves
        assert [a.status_code for a in answers] == [200, 400, 400] and len(provider.requests) == 1
        assert "--max-cost-per-attempt" in answers[1].text
        assert first.ended() == "cost_limit" and first.verdict() is None  # scored, not a failure
        summary = first.summary()
        assert summary["cost_limited"] and summary["cost_limited_by"] == "attempt"
        assert summary["cost_caps"] == {"attempt": 1e-7, "run": None} and summary["cost_usd"] > 1e-7
        # attempt 2 (or a retry) starts on a budget of its own: its first call goes through
        second = gw.open("kv-ledger.a2", time_limit=60, folder=tmp_path / "a2", needs_bridge_tools=False)
        assert post(second, "claude-sonnet-4-5").status_code == 200 and second.ended() is None
        assert len(provider.requests) == 2
        assert post(second, "claude-sonnet-4-5").status_code == 400 and second.ended() == "cost_limit"


def test_the_runs_cap_is_named_when_it_is_the_one_reached(provider: ScriptedModel, tmp_path: Path) -> None:
    with RunGateway(provider.base_url, max_cost=1e-7, rules=CostRules(attempt_cap=10.0)) as gw:
        door = gw.open("kv-ledger.a1", time_limit=60, folder=tmp_path, needs_bridge_tools=False)
        assert post(door, "claude-sonnet-4-5").status_code == 200
        refused = post(door, "claude-sonnet-4-5")
        assert refused.status_code == 400 and "the run's --max-cost" in refused.text
        assert door.summary()["cost_limited_by"] == "run"


def test_an_unpriced_call_under_a_cap_is_refused_never_uncapped(provider: ScriptedModel, tmp_path: Path) -> None:
    with RunGateway(provider.base_url, rules=CostRules(attempt_cap=5.0)) as gw:
        door = gw.open("kv-ledger.a1", time_limit=60, folder=tmp_path, needs_bridge_tools=False)
        refused = post(door, "scripted-model")
        # never forwarded: its cost would count nothing toward the cap
        assert refused.status_code == 400 and not provider.requests
        assert "scripted-model" in refused.text and "--price scripted-model=" in refused.text
        assert door.ended() == "unpriced"
        verdict = door.verdict()
        assert verdict is not None and verdict.cls == "unpriced" and "--price" in verdict.message
        assert door.summary()["unpriced_refused"] == "scripted-model"
        # the row: agent_error/unpriced whatever the CLI printed (never scored)
        parsed = adapter("claude-code").parse([], "prompt")
        failure = attempt_failure(door, parsed, "unpriced", 0, tmp_path / "none.log")
        assert failure is not None and failure.cls == "unpriced"
        assert run_fields(door, parsed)["wire"]["statuses"] == {"unpriced": 1}
    # resumed after the wire ended it (no ledger): still not scored
    resumed = attempt_failure(None, adapter("claude-code").parse([], "p"), "unpriced", 0, tmp_path / "none.log")
    assert resumed is not None and resumed.cls == "unpriced"
    # without a cap an unpriced model goes through (its cost is null, never 0)
    with RunGateway(provider.base_url) as gw:
        door = gw.open("kv-ledger.a2", time_limit=60, folder=tmp_path / "b", needs_bridge_tools=False)
        assert post(door, "scripted-model").status_code == 200 and door.summary()["cost_usd"] is None


def test_the_runs_own_price_makes_a_model_capped(provider: ScriptedModel, tmp_path: Path) -> None:
    rules = CostRules(attempt_cap=1e-7, prices=Prices.of({"scripted-model": [3.0, 15.0]}))
    with RunGateway(provider.base_url, rules=rules) as gw:
        door = gw.open("kv-ledger.a1", time_limit=60, folder=tmp_path, needs_bridge_tools=False)
        assert post(door, "scripted-model").status_code == 200
        assert post(door, "scripted-model").status_code == 400 and door.ended() == "cost_limit"
        summary = door.summary()
        ((inputs, outputs),) = provider.wire.usage
        usage = Usage(input=inputs, output=outputs)
        assert summary["cost_usd"] == round(Price(3.0, 15.0, 3.0, 3.0).cost(usage), 6) > 0
        assert summary["prices"]["overrides"] == {"scripted-model": [3.0, 15.0, 3.0, 3.0]}
        assert summary["prices"]["retrieved"]  # the table's source is still cited
        record = json.loads((tmp_path / "wire.jsonl").read_text().splitlines()[0])
        assert record["call"]["cost_usd"] == pytest.approx(Price(3.0, 15.0, 3.0, 3.0).cost(usage))


def test_price_overrides_parse_and_refuse_bad_figures() -> None:
    assert parse_price("My-Model=1,2") == ("my-model", [1.0, 2.0])
    assert parse_price("m=1,2,0.1,1.25") == ("m", [1.0, 2.0, 0.1, 1.25])
    for bad in ("m", "m=1", "m=1,2,3", "=1,2", "m=a,b"):
        with pytest.raises(BridgeError, match="MODEL=IN,OUT"):
            parse_price(bad)
    # run.json is read back from disk: a figure that is no non-negative number is refused
    for figures in ([1.0, -2.0], [1.0, float("nan")], [1.0], "12"):
        with pytest.raises(BridgeError, match="non-negative"):
            Prices.of({"m": figures})  # type: ignore[dict-item]
    prices = Prices.of({"claude-sonnet-4-5": [1.0, 2.0, 0.5, 0.5]})
    # the run's price comes before the table's, dated snapshots included
    assert prices.price("claude-sonnet-4-5-20250929") == Price(1.0, 2.0, 0.5, 0.5)
    assert Prices().price("claude-sonnet-4-5") != Price(1.0, 2.0, 0.5, 0.5)


def test_the_preflight_refuses_a_cap_that_could_never_be_reached() -> None:
    claude, cursor = adapter("claude-code"), adapter("cursor-agent")
    with pytest.raises(BridgeError) as refused:
        check_cost_caps(claude, "scripted-model", 1.0, None, CostRules(1.0))
    assert "--max-cost-per-attempt" in str(refused.value) and "--price scripted-model=IN,OUT" in str(refused.value)
    with pytest.raises(BridgeError, match="--max-cost: the model 'scripted-model'"):
        check_cost_caps(claude, "scripted-model", None, 2.0, CostRules())
    with pytest.raises(BridgeError, match="do not pass the model gateway"):
        check_cost_caps(cursor, None, 1.0, None, CostRules(1.0))
    # priced (by the table or by --price), uncapped, or the CLI's default model (checked on the wire)
    check_cost_caps(claude, "claude-sonnet-4-5", 1.0, 2.0, CostRules(1.0))
    check_cost_caps(claude, "scripted-model", 1.0, None, CostRules(1.0, Prices.of({"scripted-model": [1, 2]})))
    check_cost_caps(claude, "scripted-model", None, None, CostRules())
    check_cost_caps(claude, None, 1.0, None, CostRules(1.0))


def test_an_attempt_on_a_ray_node_is_capped_by_its_own_gateway(provider: ScriptedModel, tmp_path: Path) -> None:
    """A Ray node's attempt starts a gateway of its own (no run gateway there): the attempt's cap
    and the run's prices come with it (RunSettings.cost, built on the node from run.json)."""
    from bridge.agents.gateway.door import attempt_door

    rules = CostRules(attempt_cap=1e-7, prices=Prices.of({"scripted-model": [3.0, 15.0]}))
    door = attempt_door(adapter("claude-code"), None, provider.base_url, "kv-ledger.a1", 60, tmp_path, rules)
    assert door is not None and door.own is not None
    try:
        assert post(door, "scripted-model").status_code == 200
        assert post(door, "scripted-model").status_code == 400 and door.ended() == "cost_limit"
        assert door.summary()["cost_limited_by"] == "attempt" and door.summary()["cost_usd"] > 0
    finally:
        door.close()


def _transcript(folder: Path) -> tuple[str, list[dict[str, Any]]]:
    path = folder / "agent" / "wire.jsonl"
    assert path.is_file(), "no wire transcript was written"
    return path.read_text(), list(wire_records(path, max_records=100, max_bytes=1 << 24))


def test_a_call_refused_for_the_cost_cap_is_in_the_transcript_and_counted_once(
    provider: ScriptedModel, tmp_path: Path
) -> None:
    """A refusal that ends the attempt is what the transcript and the page show last, not a gap:
    its own record, marked refused, the model and the request's size, never a credential, no
    tokens, no cost; the row's figures count it as refused, never as a call made."""
    with RunGateway(provider.base_url, rules=CostRules(attempt_cap=1e-7)) as gw:
        door = gw.open("kv-ledger.a1", time_limit=60, folder=tmp_path / "agent", needs_bridge_tools=False)
        assert [post(door, "claude-sonnet-4-5").status_code for _ in range(3)] == [200, 400, 400]
        summary = door.summary()
        text, records = _transcript(tmp_path)
    assert KEY not in text
    assert door.token not in text
    forwarded, *refused = records
    assert forwarded["call"]["status"] == 200 and "refused" not in forwarded["call"]
    assert len(refused) == 2
    size = len(httpx.Request("POST", door.url, json=messages("claude-sonnet-4-5")).content)
    for record in refused:
        call = record["call"]
        assert call["refused"] == "cost_limit" and call["model"] == "claude-sonnet-4-5" and call["status"] is None
        assert call["cost_usd"] == 0 and not any(call["tokens"].values())
        assert record["request"] == {"method": "POST", "path": "/v1/messages", "query": "", "bytes": size}
        assert record["refusal"]["reason"] == "cost_limit" and "--max-cost-per-attempt" in record["refusal"]["message"]
        assert "response" not in record and "headers" not in record["request"]  # no header, so no credential
    # the row: one call answered, two refused; tokens and cost those of the answered call only
    assert summary["calls"] == 3 and summary["answered"] == 1
    assert summary["statuses"] == {"200": 1, "cost_limit": 2}
    assert summary["tokens"] == forwarded["call"]["tokens"]
    assert summary["cost_usd"] == round(forwarded["call"]["cost_usd"], 6)
    # the steps read back from the transcript: the answered call's only
    steps = [s for s in parsed_run(records, "p").steps if s.source == "agent"]
    assert len(steps) == 1
    section = wire_sections.wire_transcript_html(tmp_path)
    assert "3 calls through the model gateway, 1 answered, 2 refused by the gateway" in section
    assert section.count("refused by the gateway (cost_limit): never forwarded") == 2


def test_an_unpriced_call_refused_under_a_cap_is_in_the_transcript_escaped_on_the_page(
    provider: ScriptedModel, tmp_path: Path
) -> None:
    evil = "<script>alert(1)</script>"
    with RunGateway(provider.base_url, rules=CostRules(attempt_cap=5.0)) as gw:
        door = gw.open("kv-ledger.a1", time_limit=60, folder=tmp_path / "agent", needs_bridge_tools=False)
        assert post(door, evil).status_code == 400 and not provider.requests
        assert door.ended() == "unpriced"
        text, records = _transcript(tmp_path)
    assert KEY not in text
    assert door.token not in text
    assert "x-api-key" not in text
    (record,) = records
    assert record["call"]["refused"] == "unpriced" and record["call"]["model"] == evil
    assert record["refusal"]["reason"] == "unpriced" and "--price" in record["refusal"]["message"]
    page_dir = tmp_path / "page"
    shutil.copytree(SAMPLE, page_dir)
    shutil.copytree(tmp_path / "agent", page_dir / "agent", dirs_exist_ok=True)
    page = render_html(page_dir)
    assert_no_active_content(page)
    section = page[page.index("Model calls (wire transcript)") :]
    assert "1 calls through the model gateway, 0 answered, 1 refused by the gateway" in section
    assert "<span class='fail'>unpriced</span>" in section and "never forwarded" in section
    assert evil not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in section
    assert "--price" in section and f"POST <code>/v1/messages</code> ({record['request']['bytes']} bytes)" in section
