"""What an attempt's row and recording take from the wire: the failure the wire shows (before
whatever the CLI printed, however the agent ended), the tokens and cost as the provider's
answers gave them (with the CLI's own figures kept beside), the transcript, and the agent's
steps read from the transcript for a CLI whose output holds none.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from bridge.agents.adapters.events import ParsedRun
from bridge.agents.adapters.failures import Failure
from bridge.agents.gateway.door import Door
from bridge.agents.gateway.wire_trajectory import parsed_run
from bridge.recording.wire_transcript import NAME as TRANSCRIPT
from bridge.recording.wire_transcript import wire_records

#: what of its own transcript an attempt reads back for its steps (read as a stream: the records
#: are not held at once)
MAX_STEP_RECORDS = 5000
MAX_STEP_BYTES = 1024 * 1024 * 1024


def attempt_failure(door: Door | None, parsed: ParsedRun, how: str, exit_code: object, stderr: Path) -> Failure | None:
    """The wire's verdict first (an auth refusal, a provider that never answered or failed last, a
    run whose calls never offered the bridge's tools), whatever the CLI printed and however it
    ended; else what the CLI reported (bridge/agents/adapters/failures.py). A cost limit is no
    failure: the attempt is submitted and scored."""
    if door is not None:
        verdict = door.verdict()
        if verdict is not None:
            return verdict
    elif how == "auth":  # resumed after the wire ended the attempt: its ledger is gone, its end is not
        return Failure("auth", "the provider refused the key (before the run was resumed)")
    elif how == "unpriced":
        return Failure("unpriced", "under a cost cap, a call asked for an unpriced model (before the run was resumed)")
    return parsed.attempt_failure(how, exit_code, stderr)


def run_fields(door: Door | None, parsed: ParsedRun) -> dict[str, Any]:
    """The row's `run` fields about tokens and cost: from the wire when the attempt's calls went
    through the gateway, else (a CLI that bypasses it, an agent that made no call through it) as
    the CLI reported them."""
    cli = {"tokens": parsed.token_split(), "cost_usd": parsed.cost_usd}
    if door is None:
        return {"tokens": cli["tokens"], "cost_usd": parsed.cost_usd, "tokens_source": "cli"}
    wire = door.summary()
    if not wire["calls"]:  # no model call passed the gateway: the agent's own report is all there is
        return {"tokens": cli["tokens"], "cost_usd": parsed.cost_usd, "tokens_source": "cli", "wire": wire}
    return {
        "tokens": wire["tokens"],
        "cost_usd": wire["cost_usd"],
        "tokens_source": "gateway",
        "cli_reported": cli,
        "wire": wire,
    }


def keep_transcript(door: Door | None, target: Path) -> None:
    """The wire transcript beside the CLI's stream in `target` (the recording's `agent/`)."""
    if door is not None and door.transcript.is_file():
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(door.transcript, target / TRANSCRIPT)
        (target / TRANSCRIPT).chmod(0o600)


def steps_or_wire(parsed: ParsedRun, transcript: Path, prompt: str) -> ParsedRun:
    """The CLI's parsed run when it holds the agent's steps; else the steps the wire transcript
    shows (the command adapter's plain output, a CLI that prints only its answer), keeping what
    the CLI said of its end."""
    if any(s.source == "agent" for s in parsed.steps) or not transcript.is_file():
        return parsed
    records = wire_records(transcript, max_records=MAX_STEP_RECORDS, max_bytes=MAX_STEP_BYTES)
    wired = parsed_run(records, prompt)
    if not any(s.source == "agent" for s in wired.steps):
        return parsed
    wired.errors, wired.failure = parsed.errors, parsed.failure
    wired.final_message = parsed.final_message or wired.final_message
    wired.answered = parsed.answered or wired.answered
    return wired
