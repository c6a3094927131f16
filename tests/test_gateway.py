"""The model gateway (issue 38, items 1, 3, 4, 6, 7), over real HTTP on loopback: a scripted
provider (tests/scripted_model.py) or a canned one behind the gateway, real httpx clients in
front of it. No agent CLI: those are driven through `rgbridge run` in tests/test_gateway_runs.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from bridge.agents.adapters.failures import Failure
from bridge.agents.gateway import prices, protocols
from bridge.agents.gateway.ledger import Call, Ledger, RunSpend
from bridge.agents.gateway.server import AttemptWire, Gateway
from bridge.agents.gateway.transcript import Transcript
from bridge.agents.gateway.upstream import Providers, backoff, retry_after
from bridge.agents.gateway.usage import Usage, UsageReader
from bridge.recording.wire_transcript import wire_records
from tests.loopback import LoopbackServer
from tests.scripted_model import Fail, Reply, ScriptedModel

KEY = "sk-ant-real-key-gateway-test-7f3a"
OPENAI_KEY = "sk-openai-real-key-gateway-test-9c2e"
ANTHROPIC = {"anthropic-version": "2023-06-01"}


def read(path: Path) -> list[dict[str, Any]]:
    """A transcript's records, as the attempt reads them back (bridge/agents/gateway/rows.py)."""
    return list(wire_records(path, max_records=5000, max_bytes=64 * 1024 * 1024))


def messages(model: str = "claude-sonnet-4-5", *, stream: bool = True, tools: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": "hello"}],
        "tools": [{"name": t, "input_schema": {"type": "object"}} for t in tools],
    }


@pytest.fixture()
def wire(tmp_path: Path) -> Iterator[tuple[ScriptedModel, Gateway, Ledger, str, list[Failure]]]:
    """A scripted provider (policy set per test through `model.policy`), the gateway in front of
    it holding the real keys, and one attempt's ledger, transcript and placeholder."""
    with ScriptedModel(lambda conv: Reply("hi")) as model:
        providers = Providers.from_env(model.base_url, {"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": OPENAI_KEY})
        with Gateway(providers) as gateway:
            auth: list[Failure] = []
            ledger = Ledger("kv-ledger.a1", time.monotonic() + 60, key_hint=providers.hint("anthropic"))
            ledger.on_auth = auth.append
            token = gateway.open(AttemptWire(ledger, Transcript(tmp_path / "wire.jsonl")))
            yield model, gateway, ledger, token, auth


def test_key_added_on_the_host_placeholder_never_forwarded_usage_and_transcript(wire: Any, tmp_path: Path) -> None:
    model, gateway, ledger, token, _ = wire
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        streamed = client.post("/v1/messages?beta=true", headers={"x-api-key": token, **ANTHROPIC}, json=messages())
        whole = client.post("/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=messages(stream=False))
        responses = client.post(
            "/v1/responses",
            headers={"authorization": f"Bearer {token}"},
            json={"model": "gpt-5", "stream": True, "input": "hello"},
        )
        counted = client.post("/v1/messages/count_tokens", headers={"x-api-key": token, **ANTHROPIC}, json=messages())
    assert [r.status_code for r in (streamed, whole, responses, counted)] == [200, 200, 200, 200]
    assert "event: message_stop" in streamed.text and whole.json()["type"] == "message"
    # the provider saw the real keys only, never the placeholder
    assert model.wire.credentials == [KEY, KEY, OPENAI_KEY, KEY]
    # tokens: the provider's usage summed over the calls it answered (count_tokens bills nothing)
    summary = ledger.summary()
    inputs, outputs = model.wire.totals()
    assert summary["tokens"] == {"input": inputs, "output": outputs, "cache_read": 0, "cache_write": 0}
    assert summary["calls"] == 3 and summary["answered"] == 3 and summary["source"] == "gateway"
    sonnet = prices.price("claude-sonnet-4-5")
    assert sonnet is not None and summary["cost_usd"] is not None and summary["cost_usd"] > 0
    # the transcript holds every exchange, and neither the real key nor the placeholder
    text = (tmp_path / "wire.jsonl").read_text()
    assert KEY not in text and OPENAI_KEY not in text and token not in text
    records = read(tmp_path / "wire.jsonl")
    assert len(records) == 4 and "message_stop" in records[0]["response"]["body"]
    assert records[0]["request"]["headers"]["x-api-key"] == "[redacted]"


def test_revoked_or_unknown_placeholder_is_refused_before_the_provider(wire: Any) -> None:
    model, gateway, ledger, token, _ = wire
    gateway.close(token)
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for headers in ({"x-api-key": token}, {"x-api-key": KEY}, {}, {"authorization": "Bearer rgbridge-attempt-x"}):
            answer = client.post("/v1/messages", headers={**headers, **ANTHROPIC}, json=messages())
            assert answer.status_code == 401 and "rgbridge gateway" in answer.text
    assert model.requests == [] and ledger.calls == []


def test_auth_is_not_retried_and_ends_the_attempt_naming_variable_and_endpoint(wire: Any) -> None:
    model, gateway, ledger, token, auth = wire
    model.policy = lambda conv: Fail(401)
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        answer = client.post("/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=messages())
    assert answer.status_code == 401 and answer.json()["error"]["type"] == "authentication_error"
    assert len(model.requests) == 1  # no retry of a refused key
    assert len(auth) == 1 and auth[0].cls == "auth"
    verdict = ledger.verdict()
    assert verdict is not None and verdict.cls == "auth"
    assert "ANTHROPIC_API_KEY" in verdict.message and model.base_url in verdict.message


def test_outage_retried_with_retry_after_within_the_attempts_time(wire: Any) -> None:
    model, gateway, ledger, token, _ = wire
    answers = iter([Fail(529), Fail(429)])
    model.policy = lambda conv: next(answers, Reply("back"))
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        answer = client.post("/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=messages())
    assert answer.status_code == 200 and len(model.requests) == 3
    (call,) = ledger.calls
    assert call.tries == 3 and call.ok and ledger.verdict() is None
    # past the attempt's time no retry is waited for: the failure goes back to the agent
    model.policy = lambda conv: Fail(529)
    ledger.deadline = time.monotonic() + 1.0
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        answer = client.post("/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=messages())
    assert answer.status_code == 529
    verdict = ledger.verdict()
    assert verdict is not None and verdict.cls == "provider_unavailable" and "529" in verdict.message
    assert ledger.summary()["statuses"] == {"200": 1, "529": 1}


def test_cost_cap_refuses_the_next_call_and_tells_the_attempt(wire: Any) -> None:
    model, gateway, ledger, token, _ = wire
    limited: list[bool] = []
    ledger.spend = RunSpend(cap=1e-9)
    ledger.on_cost_limit = lambda: limited.append(True)
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        first = client.post("/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=messages())
        second = client.post("/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=messages())
        third = client.post("/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=messages())
    assert first.status_code == 200 and second.status_code == third.status_code == 400
    assert "--max-cost" in second.text and len(model.requests) == 1 and limited == [True]
    assert ledger.cost_limited and ledger.verdict() is None  # a cost limit is no failure: it is scored


def test_calls_without_the_bridges_tools_are_mcp_unavailable(wire: Any) -> None:
    model, gateway, ledger, token, _ = wire
    ledger.needs_bridge_tools = True
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        client.post("/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=messages(tools=("Bash", "Write")))
    verdict = ledger.verdict()
    assert verdict is not None and verdict.cls == "mcp_unavailable"
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        client.post(
            "/v1/messages",
            headers={"x-api-key": token, **ANTHROPIC},
            json=messages(tools=("Bash", "mcp__rgbridge__submit_task")),
        )
    assert ledger.verdict() is None


def test_context_overflow_is_read_from_a_400_body(wire: Any) -> None:
    model, gateway, ledger, token, _ = wire
    model.policy = lambda conv: Fail(400, "prompt is too long: 210000 tokens > 200000 maximum")
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        client.post("/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=messages())
    verdict = ledger.verdict()
    assert verdict is not None and verdict.cls == "context_overflow" and len(model.requests) == 1


def test_a_provider_that_does_not_answer_is_provider_unavailable(tmp_path: Path) -> None:
    providers = Providers.from_env("http://127.0.0.1:9", {"ANTHROPIC_API_KEY": KEY})
    with Gateway(providers) as gateway:
        ledger = Ledger("t.a1", time.monotonic() + 1.0)
        token = gateway.open(AttemptWire(ledger))
        answer = httpx.post(gateway.url + "/v1/messages", headers={"x-api-key": token}, json=messages(), timeout=30)
    assert answer.status_code == 502
    verdict = ledger.verdict()
    assert verdict is not None and verdict.cls == "provider_unavailable"


# ------------------------------------------------------------------ protocols without a CLI here

CHAT_SSE = (
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":120,'
    b'"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":100}}}\n\n'
    b"data: [DONE]\n\n"
)
GEMINI_SSE = (
    b'data: {"candidates":[{"content":{"parts":[{"text":"h"}]}}],"usageMetadata":{"promptTokenCount":50}}\r\n\r\n'
    b'data: {"candidates":[{"content":{"parts":[{"text":"i"}]},"finishReason":"STOP"}],'
    b'"usageMetadata":{"promptTokenCount":50,"candidatesTokenCount":4,"thoughtsTokenCount":6,'
    b'"cachedContentTokenCount":10}}\r\n\r\n'
)


class Canned(BaseHTTPRequestHandler):
    """A provider with one fixed answer per API (Chat Completions, Gemini); keys it saw in `seen`."""

    seen: list[tuple[str, str]] = []
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = self.headers.get("x-goog-api-key") or str(self.headers.get("Authorization") or "")
        Canned.seen.append((self.path, key))
        body = CHAT_SSE if "chat/completions" in self.path else GEMINI_SSE
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        # in pieces that split events, as a network does
        for i in range(0, len(body), 37):
            self.wfile.write(body[i : i + 37])
            self.wfile.flush()


def test_chat_completions_and_gemini_streams_through_the_gateway() -> None:
    with LoopbackServer(Canned) as server:
        providers = Providers.from_env(server.url + "/v1", {"OPENAI_API_KEY": OPENAI_KEY, "GEMINI_API_KEY": KEY})
        with Gateway(providers) as gateway:
            ledger = Ledger("t.a1", time.monotonic() + 60)
            token = gateway.open(AttemptWire(ledger))
            chat = httpx.post(
                gateway.url + "/v1/chat/completions",
                headers={"authorization": f"Bearer {token}"},
                json={"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True}, "messages": []},
                timeout=30,
            )
            gemini = httpx.post(
                gateway.url + f"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key={token}",
                json={"contents": [], "tools": [{"functionDeclarations": [{"name": "submit_task"}]}]},
                timeout=30,
            )
    assert chat.content == CHAT_SSE and gemini.content == GEMINI_SSE  # bytes passed through unchanged
    assert Canned.seen == [
        ("/v1/chat/completions", f"Bearer {OPENAI_KEY}"),
        ("/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", KEY),
    ]
    chat_call, gemini_call = ledger.calls
    assert chat_call.usage == Usage(input=20, output=7, cache_read=100)
    assert gemini_call.usage == Usage(input=40, output=10, cache_read=10)
    assert gemini_call.model == "gemini-2.5-pro" and gemini_call.bridge_tools
    assert chat_call.cost_usd == pytest.approx((20 * 2.5 + 7 * 10 + 100 * 1.25) / 1e6)


def test_usage_of_every_api_split_the_same_way() -> None:
    reader = UsageReader("openai", streamed=True)
    event = {
        "type": "response.completed",
        "response": {"usage": {"input_tokens": 90, "input_tokens_details": {"cached_tokens": 30}, "output_tokens": 12}},
    }
    reader.feed(b"event: response.completed\ndata: " + json.dumps(event).encode() + b"\n\n")
    reader.close()
    assert reader.usage == Usage(input=60, output=12, cache_read=30) and reader.completed
    anthropic = UsageReader("anthropic", streamed=True)
    start = {
        "type": "message_start",
        "message": {
            "usage": {
                "input_tokens": 5,
                "cache_read_input_tokens": 40,
                "cache_creation_input_tokens": 3,
                "output_tokens": 1,
            }
        },
    }
    for ev in (start, {"type": "message_delta", "usage": {"output_tokens": 9}}, {"type": "message_stop"}):
        anthropic.feed(f"data: {json.dumps(ev)}\n\n".encode())
    assert anthropic.usage == Usage(input=5, output=9, cache_read=40, cache_write=3) and anthropic.completed
    overloaded = UsageReader("anthropic", streamed=True)
    overloaded.feed(
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    )
    assert overloaded.error is not None and "overloaded" in overloaded.error
    junk = UsageReader("anthropic", streamed=False)
    junk.feed(b"not json")
    junk.close()
    assert junk.usage is None


def test_prices_from_data_unknown_models_unpriced() -> None:
    assert prices.source()["retrieved"] and prices.source()["source"]
    assert prices.price("claude-sonnet-4-5-20250929") == prices.price("claude-sonnet-4-5")
    assert prices.price("gpt-5-mini") != prices.price("gpt-5")
    assert prices.price("scripted-model") is None and prices.cost("scripted-model", Usage(input=10)) is None
    ledger = Ledger("t.a1", time.monotonic() + 60)
    ledger.record(
        Call(at=0, api="anthropic", kind="messages", billed=True, model="mystery", status=200, usage=Usage(input=5))
    )
    assert ledger.summary()["cost_usd"] is None and ledger.summary()["unpriced_models"] == ["mystery"]


def test_routes_urls_and_retry_after() -> None:
    assert protocols.route("POST", "/v1/messages/count_tokens", {}).billed is False
    assert protocols.route("POST", "/v1beta/models/gemini-2.5-pro:countTokens", {}).billed is False
    providers = Providers.from_env("http://127.0.0.1:5/v1", {})
    assert providers.url("openai", "/v1/responses", "") == "http://127.0.0.1:5/v1/responses"
    assert Providers.from_env("http://h:5", {}).url("anthropic", "/v1/messages", "beta=true") == (
        "http://h:5/v1/messages?beta=true"
    )
    assert providers.hint("anthropic").startswith("check ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN")
    assert retry_after("7") == 7.0 and retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert backoff(1, None) == 1.0 and backoff(3, None) == 4.0 and backoff(2, "0") == 0.0


def test_scripted_tool_names_cover_codex_namespaces() -> None:
    body = {
        "tools": [
            {"type": "namespace", "name": "mcp__rgbridge", "tools": [{"name": "start_task"}]},
            {"type": "function", "name": "exec_command"},
        ]
    }
    names = protocols.tool_names(body)
    assert names == ["mcp__rgbridge__start_task", "exec_command"] and protocols.carries_bridge_tools(names)
    assert not protocols.carries_bridge_tools(["Bash", "ToolSearch"])


def test_the_gateways_socket_is_tcp_so_asyncio_turns_nagle_off() -> None:
    # a listening socket made with proto 0 gave accepted sockets without TCP_NODELAY: every
    # streamed answer then waited ~40 ms for the client's delayed ACK (bench/gateway.py)
    import socket

    with Gateway(Providers.from_env("http://127.0.0.1:9", {})) as gateway:
        assert gateway._socket is not None and gateway._socket.proto == socket.IPPROTO_TCP


def test_the_wire_transcript_reads_back_as_the_agents_steps(wire: Any, tmp_path: Path) -> None:
    from bridge.agents.gateway.wire_trajectory import parsed_run
    from tests.scripted_model import Call as ScriptedCall
    from tests.scripted_model import Calls

    model, gateway, ledger, token, _ = wire
    model.policy = lambda conv: (
        Calls((ScriptedCall("Bash", {"command": "ls"}),), text="looking") if not conv.history else Reply("done")
    )
    first = messages(tools=("Bash",))
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        answer = client.post("/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=first)
        events = [line for line in answer.text.splitlines() if line.startswith("data:")]
        tool_use = next(
            json.loads(e[5:])["content_block"] for e in events if '"tool_use"' in e and "content_block_start" in e
        )
        second = {
            **first,
            "messages": [
                *first["messages"],
                {"role": "assistant", "content": [tool_use]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": tool_use["id"], "content": "a.txt"}],
                },
            ],
        }
        client.post("/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=second)
    run = parsed_run(read(tmp_path / "wire.jsonl"), "the prompt")
    user, step1, step2 = run.steps
    assert user.message == "the prompt" and step1.message == "looking"
    assert [(c.name, c.arguments) for c in step1.calls] == [("Bash", {"command": "ls"})]
    assert step1.results == [(tool_use["id"], "a.txt")] and step2.message == "done" and run.final_message == "done"


def test_run_gateway_doors_cut_on_auth_and_on_the_runs_cost_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bridge.agents.gateway.door import RunGateway

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    stopped: list[tuple[str, Failure]] = []
    with ScriptedModel(lambda conv: Fail(401)) as model:
        with RunGateway(model.base_url, max_cost=1e-9, on_auth=lambda k, f: stopped.append((k, f))) as gw:
            door = gw.open("kv-ledger.a1", time_limit=60, folder=tmp_path, needs_bridge_tools=True)
            headers = {"x-api-key": door.token, **ANTHROPIC}
            httpx.post(door.url + "/v1/messages", headers=headers, json=messages(), timeout=30)
            assert door.cut.is_set() and door.reason == "auth"
            ((key, failure),) = stopped
            assert (
                key == "kv-ledger.a1" and "ANTHROPIC_API_KEY" in failure.message and model.base_url in failure.message
            )
            verdict = door.verdict()
            assert verdict is not None and verdict.cls == "auth"
            # the cap: a priced answer spends it, the next call is refused and the door cut
            model.policy = lambda conv: Reply("ok")
            second = gw.open("kv-ledger.a2", time_limit=60, folder=tmp_path / "a2", needs_bridge_tools=False)
            for _ in range(2):
                httpx.post(
                    second.url + "/v1/messages", headers={"x-api-key": second.token}, json=messages(), timeout=30
                )
            assert second.reason == "cost_limit" and second.summary()["cost_limited"]
            assert second.summary()["prices"]["retrieved"]
            second.close()
            refused = httpx.post(second.url + "/v1/messages", headers={"x-api-key": second.token}, json=messages())
            assert refused.status_code == 401 and "gateway" in refused.text


def test_doctor_checks_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.agents.gateway import doctor, upstream

    check = doctor.gateway_check()
    assert check.ok and check.name == "gateway", check
    # a gateway that forgot to add the key fails the check
    monkeypatch.setattr(upstream.Key, "headers", lambda self: {})
    broken = doctor.gateway_check()
    assert not broken.ok and "did not receive the key" in broken.detail


def test_the_run_page_shows_the_wire() -> None:
    from bridge.reports.run_sections import whose_row_html

    wire = {"calls": 3, "answered": 1, "statuses": {"200": 1, "529": 2}, "waited_seconds": 41.5}
    report = {
        "metadata": {
            "agent": {"name": "claude-code"},
            "stopped_by_auth": {"attempt": "b.a1", "message": "check ANTHROPIC_API_KEY <x>"},
            "not_run": ["c.a1"],
        },
        "results": [
            {"repo_name": "a", "run": {"wire": wire}, "agent_error": {"class": "provider_unavailable"}},
            {"repo_name": "b", "run": {"wire": {"calls": 1, "statuses": {"401": 1}}}, "agent_error": {"class": "auth"}},
        ],
    }
    page = whose_row_html(report)
    assert "1 of 4 answered" in page and "200×1, 401×1, 529×2" in page and "42 s waited" in page
    assert "wire failures: auth, provider_unavailable" in page and "not run" in page and "c.a1" in page
    assert "check ANTHROPIC_API_KEY &lt;x&gt;" in page  # escaped
    assert "model calls (wire)</td><td><span class='muted'>not recorded" in whose_row_html(
        {"metadata": {}, "results": [{"run": {}}]}
    )


def test_the_gateway_stops_without_waiting_for_a_stalled_provider() -> None:
    from tests.scripted_model import Stall

    with ScriptedModel(lambda conv: Stall(120)) as model:
        gateway = Gateway(Providers.from_env(model.base_url, {"ANTHROPIC_API_KEY": KEY})).start()
        token = gateway.open(AttemptWire(Ledger("t.a1", time.monotonic() + 300)))

        def call() -> None:
            try:
                httpx.post(gateway.url + "/v1/messages", headers={"x-api-key": token}, json=messages(), timeout=200)
            except httpx.HTTPError:
                pass  # the gateway went away under it: what an agent cut at the run's end sees

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        deadline = time.monotonic() + 30
        while not model.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert model.requests, "the call never reached the provider"
        started = time.monotonic()
        gateway.stop()
        # the provider stalls 120 s: a stop well within that did not wait for it (the graceful
        # shutdown allows 2 s; a loaded machine may stretch that, never to a minute)
        assert time.monotonic() - started < 60
        caller.join(30)
        assert not caller.is_alive(), "the agent's call was not ended with the gateway"


def test_an_agent_that_exits_on_the_gateways_refusal_ended_by_the_wire(tmp_path: Path) -> None:
    """Claude Code exits at once on the gateway's cost-cap refusal, often before the run's next
    poll: the attempt still ended as the wire ended it (`cost_limit`, then submitted and scored)."""
    from bridge.agents.confine.process import run_agent

    ended = run_agent(
        ["/bin/sh", "-c", "exit 1"],
        env={"PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        stdout=tmp_path / "out",
        stderr=tmp_path / "err",
        time_limit=30,
        stop=threading.Event(),
        cut=lambda: "cost_limit",
    )
    assert ended.how == "cost_limit"
    assert (
        run_agent(
            ["/bin/sh", "-c", "exit 1"],
            env={"PATH": "/usr/bin:/bin"},
            cwd=tmp_path,
            stdout=tmp_path / "out",
            stderr=tmp_path / "err",
            time_limit=30,
            stop=threading.Event(),
            cut=lambda: None,
        ).how
        == "exit"
    )


def test_the_gateways_provider_connections_end_with_it() -> None:
    # a process running many gateways (one per run of a batch) kept every run's pooled
    # connections to the provider open until the process ended
    with ScriptedModel(lambda conv: Reply("hi")) as model:
        gateway = Gateway(Providers.from_env(model.base_url, {"ANTHROPIC_API_KEY": KEY})).start()
        try:
            token = gateway.open(AttemptWire(Ledger("t.a1", time.monotonic() + 60)))
            answer = httpx.post(
                gateway.url + "/v1/messages", headers={"x-api-key": token, **ANTHROPIC}, json=messages(), timeout=30
            )
            assert answer.status_code == 200
            client = gateway._client
            assert client is not None and not client.is_closed
        finally:
            gateway.stop()
        assert client.is_closed and gateway._client is None
