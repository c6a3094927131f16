"""An agent CLI's JSON event stream read back as steps: untrusted output, parsed defensively.

A stream is one JSON object per line (Claude Code `--output-format stream-json`, Codex `exec
--json`, Gemini CLI and cursor-agent `stream-json`). Lines that are not JSON objects are
skipped; the stream, each text and the number of steps are capped, so a runaway agent cannot
make the run folder or the trajectory unbounded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bridge.agents.adapters.failures import Failure, classify_attempt

MAX_STREAM_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_TEXT = 8000
MAX_STEPS = 5000


def clip(value: object, limit: int = MAX_TEXT) -> str:
    """Text of an untrusted value, capped (the cut is marked)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


#: the key under which `read_stream` gives each event the time its line arrived (bridge/agents/confine/process.py)
ARRIVED = "_rgbridge_arrived"


def read_stream(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a stream file, in order, each with the time its line arrived when
    `<path>.times` has it (`ARRIVED`); everything else is ignored."""
    events: list[dict[str, Any]] = []
    try:
        times = path.with_name(path.name + ".times").read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        times = []
    index = -1
    try:
        handle = open(path, "rb")  # closed below; read in bounded lines
    except OSError:
        return events
    with handle:
        read = 0
        while read < MAX_STREAM_BYTES:
            line = handle.readline(MAX_LINE_BYTES)
            if not line:
                break
            read += len(line)
            if not line.endswith(b"\n") and len(line) >= MAX_LINE_BYTES:
                handle.readline()  # drop the rest of an oversized line
                continue
            index += 1
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                obj.pop(ARRIVED, None)
                if index < len(times):
                    obj[ARRIVED] = times[index][:40]
                events.append(obj)
    return events


@dataclass
class Call:
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Step:
    """One step of a trajectory (ATIF's source/message/tool_calls/observation)."""

    source: str  # "system" | "user" | "agent"
    message: str = ""
    calls: list[Call] = field(default_factory=list)
    results: list[tuple[str, str]] = field(default_factory=list)  # (call id, content)
    model: str | None = None
    timestamp: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass
class ParsedRun:
    steps: list[Step] = field(default_factory=list)
    model: str | None = None  # as the CLI reports it
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    final_message: str | None = None
    errors: list[str] = field(default_factory=list)
    #: tokens written to the provider's prompt cache (Claude Code reports them; Codex does not)
    cache_write_tokens: int | None = None
    #: `prompt_tokens` counts the cached ones too (Codex, Gemini) rather than only the others (Claude)
    input_includes_cache: bool = False
    #: the CLI gave its final answer (a result event, a completed turn)
    answered: bool = False
    #: the CLI said it failed for a reason that is not the agent's work (bridge/agents/adapters/failures.py)
    failure: Failure | None = None

    def attempt_failure(self, how: str, exit_code: object, stderr: Path) -> Failure | None:
        """The attempt's failure: what the CLI reported (its adapter read it from the stream), else
        what its exit and the tail of its stderr say (bridge/agents/adapters/failures.py)."""
        try:
            with open(stderr, "rb") as fh:
                fh.seek(max(0, fh.seek(0, 2) - 16384))
                tail = fh.read().decode("utf-8", errors="replace")
        except OSError:
            tail = ""
        return classify_attempt(
            self.failure,
            answered=self.answered,
            errors=self.errors,
            how=how,
            exit_code=exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
            stderr=tail,
        )

    def token_split(self) -> dict[str, int | None]:
        """Input (not from the cache), output, cache read and cache write tokens, as the CLI
        reported them (None: not reported)."""
        fresh = self.prompt_tokens
        if fresh is not None and self.input_includes_cache and self.cached_tokens:
            fresh = max(0, fresh - self.cached_tokens)
        return {
            "input": fresh,
            "output": self.completion_tokens,
            "cache_read": self.cached_tokens,
            "cache_write": self.cache_write_tokens,
        }

    @property
    def tool_calls(self) -> int:
        return sum(len(s.calls) for s in self.steps)

    #: the arrival time of the event being parsed: steps made from it take it as their timestamp
    now: str | None = None

    @classmethod
    def prompted(cls, prompt: str) -> ParsedRun:
        """A run whose first step is the prompt the agent was given (ATIF's user step)."""
        run = cls()
        run.add(Step("user", message=clip(prompt)))
        return run

    def at(self, event: dict[str, Any]) -> dict[str, Any]:
        """Parse `event` next (its arrival time becomes the time of the steps it makes)."""
        arrived = event.get(ARRIVED)
        try:
            self.now = datetime.fromisoformat(arrived).isoformat() if isinstance(arrived, str) else None
        except ValueError:
            self.now = None
        return event

    def add(self, step: Step) -> Step:
        if step.timestamp is None:
            step.timestamp = self.now
        if len(self.steps) < MAX_STEPS:
            self.steps.append(step)
        return step

    def attach_result(self, call_id: str, content: object) -> None:
        """A tool result goes to the step that made the call (ATIF's observation)."""
        for step in reversed(self.steps):
            if any(c.call_id == call_id for c in step.calls):
                step.results.append((call_id, clip(content)))
                return


def as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def as_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and value >= 0 else None


def as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: object) -> str | None:
    return value[:200] if isinstance(value, str) and value else None


def model_name(value: object) -> str | None:
    """A model name the provider reported; the CLIs' placeholders for messages no model wrote
    (Claude Code's `<synthetic>` on an API error) are not one."""
    name = as_str(value)
    return None if name is None or (name.startswith("<") and name.endswith(">")) else name


def add_tokens(run: ParsedRun, prompt: object, completion: object, cached: object = None) -> None:
    for attr, value in (("prompt_tokens", prompt), ("completion_tokens", completion), ("cached_tokens", cached)):
        n = as_int(value)
        if n is not None:
            setattr(run, attr, (getattr(run, attr) or 0) + n)


def arguments(value: object) -> dict[str, Any]:
    """Tool-call arguments as a dict (some streams send them as a JSON string)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {"raw": clip(value)}
    if isinstance(value, dict):
        return (
            json.loads(clip(value, MAX_TEXT * 4))
            if len(json.dumps(value, default=str)) <= MAX_TEXT * 4
            else {"truncated": clip(value)}
        )
    return {} if value is None else {"value": clip(value)}
