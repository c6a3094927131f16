"""Why an agent CLI failed when the failure is not the agent's work: the class names of
`agent_error` and the signals every CLI shares (HTTP statuses of the provider's API, wording of
the usual messages, a process killed by a signal or a binary that is not there).

Each adapter module reads its own CLI's signals (Claude Code's result event, Codex's
`turn.failed`, ...) into `ParsedRun.failure` and falls back on `classify_end` here for what is
common; the run (bridge/agents/run/runner.py) retries such an attempt and never scores it as a zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

FailureClass = Literal[
    "auth",
    "rate_limit",
    "provider_unavailable",
    "context_overflow",
    "cli_crash",
    "cli_missing",
    # the agent's model calls never offered the bridge's MCP tools (bridge/agents/gateway/ledger.py)
    "mcp_unavailable",
    # under a cost cap, a call for a model no price lists (bridge/agents/gateway/ledger.py)
    "unpriced",
]
CLASSES: tuple[str, ...] = get_args(FailureClass)

#: what a shell and exec report for a command that is not there (POSIX: 127 not found, 126 not executable)
EXIT_NOT_FOUND = (126, 127)
MAX_MESSAGE = 500


@dataclass(frozen=True)
class Failure:
    cls: FailureClass
    message: str

    def as_dict(self, retries: int) -> dict[str, object]:
        return {"class": self.cls, "message": self.message, "retries": retries}


def from_status(status: object) -> FailureClass | None:
    """The class of a provider API's HTTP status (401/403 key refused, 429 rate limit, 413 too large,
    5xx and Anthropic's 529 overloaded)."""
    if isinstance(status, bool) or not isinstance(status, int | str):
        return None
    try:
        code = int(status)
    except ValueError:
        return None
    if code in (401, 403):
        return "auth"
    if code == 429:
        return "rate_limit"
    if code == 413:
        return "context_overflow"
    if code == 529 or 500 <= code <= 599:
        return "provider_unavailable"
    return None


#: wording shared by the CLIs' error messages, most specific first (a 429 message mentioning a
#: retry is a rate limit, not a crash)
PATTERNS: tuple[tuple[re.Pattern[str], FailureClass], ...] = (
    # Codex with the run's server marked `required` (bridge/agents/adapters/codex.py) that did not start
    (
        re.compile(r"required MCP servers? failed to initiali[sz]e|MCP startup (failed|incomplete)", re.I),
        "mcp_unavailable",
    ),
    (
        re.compile(
            r"prompt is too long|context[_ ](length|window)|maximum context|too many tokens|"
            r"context_length_exceeded|input is too long|exceeds the context",
            re.I,
        ),
        "context_overflow",
    ),
    (
        re.compile(
            r"not logged in|please run /login|invalid[ _]api[ _]key|authenticat|unauthori[sz]ed|"
            r"\b401\b|\b403\b|permission[ _]denied|forbidden|missing (api )?key|api key (is )?(missing|not set)|"
            r"environment variable\W.*(api_key|token)",
            re.I,
        ),
        "auth",
    ),
    (re.compile(r"rate[ _-]?limit|too many requests|\b429\b|quota", re.I), "rate_limit"),
    (
        re.compile(
            r"overloaded|\b529\b|\b50[0234]\b|service unavailable|internal server error|bad gateway|"
            r"gateway timeout|server[_ ]error|connection (to the api )?(was )?(lost|refused|reset|error)|"
            r"econnreset|econnrefused|stream disconnected|stream closed|connection_failed|"
            r"error sending request|timed out waiting",
            re.I,
        ),
        "provider_unavailable",
    ),
)


def classify_text(text: str) -> FailureClass | None:
    for pattern, cls in PATTERNS:
        if pattern.search(text):
            return cls
    return None


def clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "..."


def crash_or_missing(how: str, exit_code: int | None, stderr: str, *, answered: bool) -> Failure | None:
    """A CLI that died without an answer: killed by a signal (not the run's time limit or stop),
    `exec` failing on a binary that is not there, or a non-zero exit that produced no result."""
    if how != "exit" or exit_code is None or exit_code == 0:
        return None
    tail = clip(stderr[-2000:])
    if exit_code in EXIT_NOT_FOUND and re.search(
        r"no such file|not found|permission denied|cannot execute", stderr, re.I
    ):
        return Failure("cli_missing", tail or f"exit code {exit_code}: the agent's command was not found")
    if exit_code < 0 or exit_code >= 128:
        number = -exit_code if exit_code < 0 else exit_code - 128
        return Failure("cli_crash", f"killed by signal {number}" + (f": {tail}" if tail else ""))
    if answered:
        return None
    return Failure("cli_crash", f"exit code {exit_code} without a result" + (f": {tail}" if tail else ""))


def classify_end(how: str, exit_code: int | None, stderr: str, *, answered: bool, errors: list[str]) -> Failure | None:
    """The shared fallback of every adapter: a non-zero exit whose errors or stderr name a provider
    failure gets that class, else a crash or a missing binary; a clean exit is the agent's work."""
    if how != "exit" or exit_code in (None, 0):
        return None
    missing = crash_or_missing(how, exit_code, stderr, answered=answered)
    if missing is not None and missing.cls == "cli_missing":
        return missing
    for text in [*reversed(errors), stderr[-4000:]]:
        cls = classify_text(text)
        if cls is not None:
            return Failure(cls, clip(text))
    return missing


def classify_attempt(
    reported: Failure | None,
    *,
    answered: bool,
    errors: list[str],
    how: str,
    exit_code: int | None,
    stderr: str,
) -> Failure | None:
    """An attempt's failure, if any: what the CLI itself reported (its adapter read it from the
    stream), else the shared reading of its exit and stderr. An agent cut by the time limit or
    stopped by the run has not failed: its work is scored."""
    if how != "exit":
        return None
    if reported is not None:
        return reported
    return classify_end(how, exit_code, stderr, answered=answered, errors=errors)
