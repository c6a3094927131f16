"""An attempt's conversation read back from its wire transcript (bridge/agents/gateway/transcript.py)
as a parsed run (steps with text, tool calls and their results), for agents whose CLI writes no
trajectory of its own: each answered model call is an agent step (its text and tool calls, read
from the answer's SSE events or JSON body in the API's own shape), and the tool results the next
request carried are that step's observations. The transcript is untrusted: read field by field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from bridge.agents.adapters.events import Call, ParsedRun, Step, arguments, as_dict, as_list, clip


def _events(body: str) -> list[dict[str, Any]]:
    """The JSON objects of an SSE body, or the one JSON body."""
    text = body.strip()
    if text.startswith("{") or text.startswith("["):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            return [data]
        if isinstance(data, list):
            return [d for d in data if isinstance(d, dict)]
    out: list[dict[str, Any]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        payload = "\n".join(line[5:].strip() for line in block.split("\n") if line.startswith("data:"))
        if not payload or payload == "[DONE]":
            continue
        try:
            data = json.loads(payload)
        except ValueError:
            continue
        if isinstance(data, dict):
            out.append(data)
    return out


def _anthropic(events: list[dict[str, Any]]) -> tuple[str, list[Call]]:
    texts: list[str] = []
    calls: dict[int, tuple[str, str, list[str]]] = {}
    for ev in events:
        if ev.get("type") == "message":  # a whole answer
            for block in as_list(ev.get("content")):
                block = as_dict(block)
                if block.get("type") == "text":
                    texts.append(str(block.get("text", "")))
                elif block.get("type") == "tool_use":
                    calls[len(calls)] = (str(block.get("id", "")), str(block.get("name", "")), [])
                    calls[len(calls) - 1][2].append(json.dumps(block.get("input") or {}))
        elif ev.get("type") == "content_block_start":
            block = as_dict(ev.get("content_block"))
            if block.get("type") == "tool_use" and isinstance(ev.get("index"), int):
                calls[ev["index"]] = (str(block.get("id", "")), str(block.get("name", "")), [])
        elif ev.get("type") == "content_block_delta":
            delta = as_dict(ev.get("delta"))
            if delta.get("type") == "text_delta":
                texts.append(str(delta.get("text", "")))
            elif delta.get("type") == "input_json_delta" and ev.get("index") in calls:
                calls[ev["index"]][2].append(str(delta.get("partial_json", "")))
    return "".join(texts), [Call(i[:200], n[:200], arguments("".join(p) or "{}")) for i, n, p in calls.values()]


def _responses(events: list[dict[str, Any]]) -> tuple[str, list[Call]]:
    output: list[Any] = []
    for ev in events:
        if ev.get("type") in ("response.completed", "response.incomplete"):
            output = as_list(as_dict(ev.get("response")).get("output"))
        elif "output" in ev and isinstance(ev.get("output"), list):  # a whole answer
            output = ev["output"]
    texts: list[str] = []
    calls: list[Call] = []
    for item in map(as_dict, output):
        if item.get("type") == "message":
            texts += [str(as_dict(c).get("text", "")) for c in as_list(item.get("content"))]
        elif item.get("type") in ("function_call", "custom_tool_call"):
            name = str(item.get("name", ""))
            if item.get("namespace"):
                name = f"{item['namespace']}__{name}"
            raw = item.get("arguments", item.get("input"))
            calls.append(Call(str(item.get("call_id", ""))[:200], name[:200], arguments(raw)))
    return "".join(texts), calls


def _chat(events: list[dict[str, Any]]) -> tuple[str, list[Call]]:
    texts: list[str] = []
    calls: dict[int, list[str]] = {}
    for ev in events:
        for choice in map(as_dict, as_list(ev.get("choices"))[:1]):
            part = as_dict(choice.get("delta")) or as_dict(choice.get("message"))
            if isinstance(part.get("content"), str):
                texts.append(part["content"])
            for n, tc in enumerate(map(as_dict, as_list(part.get("tool_calls")))):
                index: int = tc["index"] if isinstance(tc.get("index"), int) else n
                slot = calls.setdefault(index, ["", "", ""])
                fn = as_dict(tc.get("function"))
                slot[0] = slot[0] or str(tc.get("id") or "")
                slot[1] = slot[1] or str(fn.get("name") or "")
                slot[2] += str(fn.get("arguments") or "")
    return "".join(texts), [Call(i[:200], n[:200], arguments(a or "{}")) for i, n, a in calls.values()]


def _gemini(events: list[dict[str, Any]]) -> tuple[str, list[Call]]:
    texts: list[str] = []
    calls: list[Call] = []
    for ev in events:
        for cand in map(as_dict, as_list(ev.get("candidates"))[:1]):
            for part in map(as_dict, as_list(as_dict(cand.get("content")).get("parts"))):
                if isinstance(part.get("text"), str):
                    texts.append(part["text"])
                fc = as_dict(part.get("functionCall"))
                if fc:
                    name = str(fc.get("name", ""))[:200]
                    calls.append(Call(str(fc.get("id") or name)[:200], name, arguments(fc.get("args"))))
    return "".join(texts), calls


def _results(api: str, request: dict[str, Any]) -> list[tuple[str, object]]:
    """The tool results a request carries back (its last message's)."""
    out: list[tuple[str, object]] = []
    if api == "anthropic":
        messages = as_list(request.get("messages"))
        last = as_dict(messages[-1]) if messages else {}
        for block in map(as_dict, as_list(last.get("content"))):
            if block.get("type") == "tool_result":
                out.append((str(block.get("tool_use_id", "")), block.get("content", "")))
    elif api == "openai":
        for item in map(as_dict, as_list(request.get("input"))):
            if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                out.append((str(item.get("call_id", "")), item.get("output", "")))
        for message in map(as_dict, as_list(request.get("messages"))):
            if message.get("role") == "tool":
                out.append((str(message.get("tool_call_id", "")), message.get("content", "")))
    else:
        contents = as_list(request.get("contents"))
        last = as_dict(contents[-1]) if contents else {}
        for part in map(as_dict, as_list(last.get("parts"))):
            fr = as_dict(part.get("functionResponse"))
            if fr:
                out.append((str(fr.get("id") or fr.get("name") or ""), fr.get("response", "")))
    return out


READERS = {"anthropic": _anthropic, "gemini": _gemini}


def parsed_run(records: Iterable[dict[str, Any]], prompt: str) -> ParsedRun:
    """The transcript's billed, answered calls as a parsed run (the agent's steps, in order).
    A tool result is attached once: a request sent again (after a failed or refused call) carries
    the same results as the first."""
    run = ParsedRun.prompted(prompt)
    attached: set[str] = set()
    for record in records:
        call = as_dict(record.get("call"))
        if not call.get("billed"):
            continue
        api = str(call.get("api", ""))
        try:
            request = json.loads(str(as_dict(record.get("request")).get("body", "")))
        except ValueError:
            request = {}
        for call_id, content in _results(api, as_dict(request)):
            if call_id not in attached:
                attached.add(call_id)
                run.attach_result(call_id, content)
        status = call.get("status")
        if not isinstance(status, int) or not 200 <= status < 300:
            continue
        events = _events(str(as_dict(record.get("response")).get("body", "")))
        if api == "openai":
            reader = (
                _chat if as_dict(record.get("request")).get("path", "").endswith("/chat/completions") else _responses
            )
        else:
            reader = READERS.get(api, _anthropic)
        text, calls = reader(events)
        tokens = as_dict(call.get("tokens"))
        model = call.get("model") if isinstance(call.get("model"), str) else None
        run.model = model or run.model
        step = Step("agent", message=clip(text), calls=calls, model=model)
        if tokens:
            step.prompt_tokens = sum(v for k, v in tokens.items() if k != "output" and isinstance(v, int))
            step.completion_tokens = tokens.get("output") if isinstance(tokens.get("output"), int) else None
        run.add(step)
        run.answered = True
        if text:
            run.final_message = clip(text)
    return run
