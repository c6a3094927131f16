"""The options of one run as given (`rgbridge run`'s flags), as `run.json` keeps them for `--resume`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from bridge.agents.confine.choose import SandboxKind
from bridge.errors import BridgeError
from bridge.scoring.run.backend import BackendName

RUN_FILE = "run.json"


class RunOptions(BaseModel):
    """The options of one run, as given (and as `run.json` keeps them for `--resume`)."""

    agent: str
    tasks: list[str]
    attempts: int = Field(1, gt=0)
    time_limit: float = Field(1800.0, gt=0)
    workers: int = Field(1, gt=0)
    model: str | None = None
    model_base_url: str | None = None
    agent_bin: str | None = None
    agent_cmd: str | None = None
    on_exit: Literal["submit", "abandon"] = "submit"
    profile: Literal["both", "strict", "compat"] = "both"
    run_id: str
    recordings: str
    server_args: list[str] = Field(default_factory=list)
    # issue 31: honest, reproducible, priced rows
    retries: int = Field(2, ge=0)
    retry_backoff: list[float] = Field(default_factory=lambda: [5.0, 20.0])
    allow_errors: bool = False
    prompt: Literal["bridge", "upstream", "file"] = "bridge"
    prompt_file: str | None = None
    agent_version: str | None = None
    max_cost: float | None = Field(None, gt=0)
    #: issue 38 item 6: each attempt's own cap, and the run's prices (`--price`: model -> USD per
    #: million tokens [in, out] or [in, out, cache_read, cache_write]) before the table
    max_cost_per_attempt: float | None = Field(None, gt=0)
    prices: dict[str, list[float]] = Field(default_factory=dict)
    #: how each agent is confined (bridge/agents/confine/; `none` marks every row unconfined)
    sandbox: SandboxKind = "auto"
    #: what else the agents may read (`--agent-bind`, read-only): absolute paths
    agent_binds: list[str] = Field(default_factory=list)
    #: one attempt's limits (bridge/agents/confine/model.py Limits: memory, processes, disk)
    limits: dict[str, int] = Field(default_factory=dict)
    #: issue 38: the agent's network (bridge/agents/confine/network.py); None: closed, or host
    #: under `--sandbox none`; `allow_hosts` are what `allow`'s proxy lets through
    network: Literal["closed", "allow", "host"] | None = None
    allow_hosts: list[str] = Field(default_factory=list)
    # issue 32: where attempts run (bridge/agents/run/backend.py)
    backend: BackendName = "local"
    ray_address: str | None = None


def load_options(output_dir: Path) -> RunOptions | None:
    path = output_dir / RUN_FILE
    if not path.is_file():
        return None
    try:
        return RunOptions.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BridgeError(f"{path}: not a run file this bridge can resume ({str(exc).splitlines()[0]})") from None
