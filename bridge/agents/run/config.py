"""A run's configuration: everything that makes its rows what they are (the CLI's exact version,
the model asked for, the prompt template's hash, the time limit, attempts, sandbox, bridge
version...) and its hash, pinned in the run folder's `config.json` so that `--resume` cannot
finish a run under another configuration, and printed so that two runs can be told apart."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.errors import BridgeError
from bridge.release import exact_version

if TYPE_CHECKING:
    from bridge.agents.run.options import RunOptions
    from bridge.agents.run.prompt import PromptTemplate
    from bridge.agents.run.settings import RunSettings

CONFIG_FILE = "config.json"

#: the run configuration's fields that go into report metadata `config` (bridge/scoring/run/reporting.py)
CONFIG_METADATA = (
    "hash",
    "cli_version",
    "prompt",
    "prompt_hash",
    "time_limit_seconds",
    "attempts",
    "sandbox",
    "limits",
    "bridge_version",
)


def run_config(options: RunOptions, settings: RunSettings, template: PromptTemplate) -> dict[str, Any]:
    """What makes this run's rows what they are, and its hash (sha256 of the canonical JSON):
    the agent and its CLI's exact version, the model asked for, the prompt template, the time
    limit, attempts, tasks, profile, what an unsubmitted end does, the sandbox and the bridge.
    Not the run id, folders, workers, retries or the cost cap (they change no row's score)."""
    fields: dict[str, Any] = {
        "agent": options.agent,
        "cli_version": settings.agent_version,
        "agent_cmd": options.agent_cmd if settings.adapter.takes_command else None,
        "model": options.model,
        "prompt": options.prompt,
        "prompt_hash": template.digest,
        "time_limit_seconds": options.time_limit,
        "attempts": options.attempts,
        "tasks": list(options.tasks),
        "profile": options.profile,
        "on_exit": options.on_exit,
        # the kind the run's pre-flight resolved (`auto` is bwrap on one machine, docker on another)
        "sandbox": settings.sandbox,
        "agent_binds": [str(p) for p in settings.agent_binds],
        "limits": settings.limits.as_dict(),
        "bridge_version": exact_version(),
    }
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return {"hash": digest, **fields}


def config_line(config: dict[str, Any]) -> str:
    return (
        f"{config['agent']} {config['cli_version']}, model {config['model'] or 'default'}, prompt {config['prompt']} "
        f"{str(config['prompt_hash'])[:12]}, time limit {config['time_limit_seconds']:g}s, "
        f"{config['attempts']} attempt(s), sandbox {config['sandbox']}, bridge {config['bridge_version']}"
    )


def check_config(path: Path, config: dict[str, Any], *, resume: bool) -> None:
    """A resumed run keeps the configuration it started with: the same CLI version, prompt, time
    limit... (its rows would not be one row otherwise)."""
    if not resume or not path.is_file():
        return
    try:
        before = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise BridgeError(f"{path}: unreadable; the run's configuration cannot be compared") from None
    if not isinstance(before, dict) or before.get("hash") == config["hash"]:
        return
    changed = [
        f"{k}: {before.get(k)!r} -> {config.get(k)!r}"
        for k in sorted(set(before) | set(config))
        if k != "hash" and before.get(k) != config.get(k)
    ]
    raise BridgeError(
        "--resume: the run's configuration changed since it started ("
        + "; ".join(changed or ["hash"])
        + "); its rows would not be comparable. Start a new run (another --output-dir) instead"
    )
