"""One attempt of an agent on a task, owned by the run from start to score.

1. A fresh attempt folder: the workspace, the agent's own HOME and TMPDIR, its recordings folder.
2. The run opens the session itself (the START verb, in this process) and lets it go: the MCP
   server the agent launches re-attaches it, so the session starts when the agent starts and
   does not wait for the agent to call start_task.
3. The agent runs in its own process group until it exits, the time limit ends it (SIGTERM,
   then SIGKILL) or the run stops.
4. Once the group is gone (and with it the MCP server and its hold on the session), the run
   re-attaches the session, records what the agent did (`agent_run`, its stream and ATIF
   trajectory in the recording) and, if the agent did not submit, submits the workspace as it
   is (`time_limit` or `agent_exit`; `--on-exit abandon` quits instead), then waits for the score.

Nothing depends on the agent behaving: an agent that submitted has its score finished (a job
its server left is resumed), one that did not is submitted for it, one that hangs is cut.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from bridge.agents.adapter import Adapter, AttemptSetup, McpServer
from bridge.agents.events import ParsedRun, read_stream
from bridge.agents.failures import Failure
from bridge.agents.process import Ended, run_agent
from bridge.agents.prompt import PromptTemplate, bridge_template
from bridge.agents.trajectory import to_atif
from bridge.errors import BridgeError
from bridge.fs.files import write_json_atomic
from bridge.recording.clock import parse_iso
from bridge.recording.integrity import try_seal
from bridge.scoring.result import ScoreResult
from bridge.scoring.run.reporting import build_entry
from bridge.sessions.answers import StartTaskResult
from bridge.sessions.live import load_record
from bridge.sessions.manager import SessionManager
from bridge.sessions.models import ClientInfo, ResultStatus, SessionRecord, Signal, result_status
from bridge.sessions.ownership import held_elsewhere
from bridge.sessions.settings import SessionSettings
from bridge.sessions.verbs import START
from bridge.sessions.verbspec import CallContext
from bridge.tasks.catalog import Catalog
from bridge.tasks.model import Task

STATE_FILE = "state.json"
LOCK_WAIT_SECONDS = 3600.0  # a scoring job the agent's server handed on may hold the session
SCORE_POLL_SECONDS = 2.0


class Stopped(BridgeError):
    """The run was stopped (Ctrl-C) while this attempt ran; `--resume` picks it up."""


@dataclass(frozen=True)
class RunSettings:
    """What every attempt of one run shares."""

    adapter: Adapter
    binary: str
    agent_version: str
    catalog: Catalog
    output_dir: Path
    recordings: Path
    run_id: str
    time_limit: float
    profile: str
    on_exit: Literal["submit", "abandon"] = "submit"
    model: str | None = None
    model_base_url: str | None = None
    agent_cmd: str | None = None
    server_args: tuple[str, ...] = ()  # task source options passed to the agent's MCP server
    server_env: dict[str, str] = field(default_factory=dict)
    # issue 31: the prompt template (bridge/agents/prompt.py) and the run's configuration (runner.run_config)
    prompt: PromptTemplate = field(default_factory=bridge_template)
    run_config: dict[str, Any] = field(default_factory=dict)


@dataclass
class Live:
    """What the progress table shows of a running attempt (written by the attempt's thread)."""

    state: str = "waiting"
    started: float | None = None
    ended: float | None = None
    workspace: Path | None = None
    stream: Path | None = None
    node: str = ""  # the Ray node running it (--backend ray)


def attempt_key(task_id: str, attempt: int) -> str:
    return f"{task_id}.a{attempt}"


class Attempt:
    def __init__(self, settings: RunSettings, task: Task, number: int, stop: threading.Event) -> None:
        self.s = settings
        self.task = task
        self.number = number
        self.stop = stop
        self.key = attempt_key(task.id, number)
        self.dir = settings.output_dir / "attempts" / task.id / f"a{number}"
        self.rec_dir = settings.recordings / settings.run_id / task.id / f"a{number}"
        self.workspace = self.dir / "workspace"
        self.live = Live(workspace=self.workspace, stream=self.dir / "agent" / "stream.jsonl")

    # ------------------------------------------------------------------ state on disk
    def state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.dir / STATE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, **fields: Any) -> None:
        write_json_atomic(self.dir / STATE_FILE, {**self.state(), **fields})

    def _manager(self, *, reattach: bool) -> SessionManager:
        return SessionManager(
            self.s.catalog,
            recordings_dir=self.rec_dir,
            settings=SessionSettings(
                profile=cast(Any, self.s.profile), reattach=reattach, run_id=self.s.run_id, finish_jobs_at_exit=False
            ),
        )

    # ------------------------------------------------------------------ the attempt
    def run(self) -> dict[str, Any]:
        """The attempt to its report entry (resuming whatever an earlier run left)."""
        state = self.state()
        if state.get("session_id") and state.get("phase") in ("agent_done", "submitted"):
            return self._finish(state["session_id"], None, None)
        self._clear_unfinished()
        self.live.state = "starting"
        self.live.started = time.monotonic()
        for sub in ("workspace", "home", "tmp", "agent"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self._save(phase="starting", started_at=time.time())
        sid = self._open_session()
        self._save(phase="running", session_id=sid)
        ended, parsed = self._run_agent(sid)
        self._save(
            # a run stopped mid-agent redoes the attempt on resume; an ended agent's work is scored
            phase="stopped" if ended.how == "stopped" else "agent_done",
            ended=ended.how,
            exit_code=ended.exit_code,
            agent_seconds=ended.seconds,
            agent_ended_at=time.time(),
        )
        if ended.how == "stopped":
            raise Stopped(f"{self.key}: stopped")
        return self._finish(sid, ended, parsed)

    def _clear_unfinished(self) -> None:
        """An attempt cut before its agent ended is redone from scratch; its folders are kept aside."""
        leftovers = [p for p in (self.dir, self.rec_dir) if p.exists()]
        if not leftovers:
            return
        if self.rec_dir.exists():
            mgr = self._manager(reattach=True)
            try:
                for sid, session in list(mgr.sessions.items()):
                    if session.record.state in ("active", "paused"):
                        mgr.quit(sid, "rgbridge run was stopped before the agent ended; attempt redone")
            finally:
                mgr.close()
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for path in leftovers:
            path.rename(path.with_name(f"{path.name}.interrupted-{stamp}"))

    def _open_session(self) -> str:
        mgr = self._manager(reattach=False)
        try:
            context = CallContext(client=ClientInfo(name=self.s.adapter.name, version=self.s.agent_version))
            opened = START.invoke(mgr, None, context=context, task_id=self.task.id, workspace=str(self.workspace))
            return cast(StartTaskResult, opened).session_id
        finally:
            mgr.close()  # the agent's MCP server re-attaches the session

    def setup(self) -> AttemptSetup:
        server = McpServer(
            command=self.s.server_env.get("RGBRIDGE_PYTHON", "") or _python(),
            args=[
                "-m",
                "mcp_server",
                "--workspace",
                str(self.workspace),
                "--recordings",
                str(self.rec_dir),
                "--run-id",
                self.s.run_id,
                "--profile",
                self.s.profile,
                *self.s.server_args,
            ],
            env={k: v for k, v in self.s.server_env.items() if k != "RGBRIDGE_PYTHON"},
        )
        return AttemptSetup(
            binary=self.s.binary,
            prompt=self.s.prompt.render(self.task, self.s.time_limit),
            workspace=self.workspace,
            home=self.dir / "home",
            tmp=self.dir / "tmp",
            server=server,
            model=self.s.model,
            model_base_url=self.s.model_base_url,
            agent_cmd=self.s.agent_cmd,
        )

    def _run_agent(self, sid: str) -> tuple[Ended, ParsedRun]:
        setup = self.setup()
        launch = self.s.adapter.build(setup)
        for path, text in launch.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        # what the agent was given and under which configuration, kept with its stream (and recording)
        (self.dir / "agent" / "prompt.txt").write_text(setup.prompt, encoding="utf-8")
        write_json_atomic(self.dir / "agent" / "run_config.json", self.s.run_config)
        self.live.state = "agent"
        ended = run_agent(
            launch.argv,
            env=launch.env,
            cwd=launch.cwd or self.workspace,
            stdout=self.dir / "agent" / "stream.jsonl",
            stderr=self.dir / "agent" / "stderr.log",
            time_limit=self.s.time_limit,
            stop=self.stop,
        )
        parsed = self.s.adapter.parse(read_stream(self.dir / "agent" / "stream.jsonl"), setup.prompt)
        return ended, parsed

    # ------------------------------------------------------------------ after the agent
    def _finish(self, sid: str, ended: Ended | None, parsed: ParsedRun | None) -> dict[str, Any]:
        self.live.state = "scoring"
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while held_elsewhere(self.rec_dir / sid):  # the agent's server, or a scoring job it handed on
            if self.stop.is_set():
                raise Stopped(f"{self.key}: stopped")
            if time.monotonic() > deadline:
                raise BridgeError(f"{self.key}: session {sid} is still held by another process")
            time.sleep(0.2)
        mgr = self._manager(reattach=True)
        try:
            if sid not in mgr.sessions and load_record(self.rec_dir / sid).state in ("active", "paused"):
                mgr.attach(sid)
            live = sid in mgr.sessions  # else finished on disk: the agent's server scored it
            state = self.state()
            if parsed is None:  # resumed after the agent ended: read its stream again
                setup = self.setup()
                parsed = self.s.adapter.parse(read_stream(self.dir / "agent" / "stream.jsonl"), setup.prompt)
            how = ended.how if ended else str(state.get("ended", "exit"))
            signal: Signal = "time_limit" if how == "time_limit" else "agent_exit"
            scoring_started = time.monotonic()
            if live and mgr.status(sid).state in ("active", "paused"):
                self._keep_trajectory(mgr, sid, parsed, how, state)
                failure = parsed.attempt_failure(how, state.get("exit_code"), self.dir / "agent" / "stderr.log")
                if failure is not None:  # the CLI failed, the agent did not: nothing is scored
                    mgr.quit(sid, f"agent_error ({failure.cls}): {failure.message}")
                    self._save(phase="agent_error", agent_error=failure.as_dict(0))
                    self.live.state = f"agent_error ({failure.cls})"
                    self.live.ended = time.monotonic()
                    return self._entry(result_status(*self._on_disk(sid)), parsed, "agent_error", 0.0, failure)
                if self.s.on_exit == "abandon" and signal == "agent_exit":
                    mgr.quit(sid, "the agent ended without submitting (--on-exit abandon)")
                    self._save(phase="abandoned")
                    raise BridgeError(f"{self.key}: abandoned (the agent ended without submitting)")
                mgr.submit(sid, signal=signal)
                submitted_by: str = signal
            else:
                submitted_by = "agent"
            self._save(phase="submitted", submitted_by=submitted_by)
            result = self._wait_result(mgr, sid) if live else result_status(*self._on_disk(sid))
            scoring_seconds = scoring_span(self.rec_dir / sid) or round(time.monotonic() - scoring_started, 3)
            if submitted_by == "agent":
                # The agent submitted: its recording was sealed without the agent's files; add them
                # and seal again (the seal covers every file of the recording). The detached scoring
                # process seals after its result shows: ours must come after its, never beside it.
                while held_elsewhere(self.rec_dir / sid) and time.monotonic() < deadline and not self.stop.is_set():
                    time.sleep(0.2)
                self._keep_trajectory(mgr, sid, parsed, how, state, record_event=False)
                try_seal(self.rec_dir / sid)
        finally:
            mgr.close()
        entry = self._entry(result, parsed, submitted_by, scoring_seconds)
        self._save(phase="scored", scoring_seconds=scoring_seconds)
        self.live.state = "done"
        self.live.ended = time.monotonic()
        return entry

    def _keep_trajectory(
        self,
        mgr: SessionManager,
        sid: str,
        parsed: ParsedRun,
        how: str,
        state: dict[str, Any],
        *,
        record_event: bool = True,
    ) -> None:
        """The CLI's own stream and its ATIF trajectory, in the recording and the attempt folder."""
        atif = to_atif(
            parsed,
            session_id=sid,
            agent=self.s.adapter.name,
            version=self.s.agent_version,
            extra={"task": self.task.id, "attempt": self.number, "ended": how, "run_id": self.s.run_id},
        )
        write_json_atomic(self.dir / "agent" / "trajectory.json", atif)
        target = self.rec_dir / sid / "agent"
        target.mkdir(parents=True, exist_ok=True)
        for name in ("stream.jsonl", "stream.jsonl.times", "prompt.txt", "run_config.json", "stderr.log"):
            if (self.dir / "agent" / name).is_file():
                shutil.copyfile(self.dir / "agent" / name, target / name)
        write_json_atomic(target / "trajectory.json", atif)
        if record_event:
            # the session this process holds: its event log takes the typed `agent_run` record
            mgr.sessions[sid].events.append(
                "agent_run",
                agent=self.s.adapter.name,
                version=self.s.agent_version,
                model=parsed.model or self.s.model,
                ended=how,
                exit_code=state.get("exit_code"),
                agent_seconds=float(state.get("agent_seconds") or 0.0),
                tool_calls=parsed.tool_calls,
                steps=len(parsed.steps),
                trajectory="agent/trajectory.json",
            )

    def _on_disk(self, sid: str) -> tuple[SessionRecord, Path]:
        return load_record(self.rec_dir / sid), self.rec_dir / sid

    def _wait_result(self, mgr: SessionManager, sid: str) -> ResultStatus:
        while True:
            if self.stop.is_set():
                raise Stopped(f"{self.key}: stopped while scoring")
            status = mgr.result(sid, wait_seconds=SCORE_POLL_SECONDS)
            if status.state in ("done", "failed"):
                return status

    def _entry(
        self,
        status: ResultStatus,
        parsed: ParsedRun,
        submitted_by: str,
        scoring_seconds: float,
        failure: Failure | None = None,
    ) -> dict[str, Any]:
        state = self.state()
        if failure is not None:  # not the agent's work: no score, in no mean (runner retries it)
            entry: dict[str, Any] = {"repo_name": self.task.id, "lang": self.task.lang, "outcome": "agent_error"}
            entry["agent_error"] = failure.as_dict(0)
        elif status.state == "done" and status.result is not None:
            result = ScoreResult.model_validate(status.result)
            entry = build_entry(result, "compat" if "compat" in result.profiles else None)
        else:  # the scoring job failed: an engine fault, not the agent's (infra_error)
            entry = {"repo_name": self.task.id, "lang": self.task.lang, "error": status.message or "scoring failed"}
            entry["outcome"] = "infra_error"
        started = float(state.get("started_at") or time.time())
        wall = round(time.time() - started, 3)
        agent_seconds = float(state.get("agent_seconds") or 0.0)
        # The bridge's own share: the attempt's wall time outside the agent's run and the scoring
        # (they overlap when the agent submitted and waited for its server to score).
        agent_end = float(state.get("agent_ended_at") or started + agent_seconds)
        busy = (
            agent_seconds
            + scoring_seconds
            - overlap((agent_end - agent_seconds, agent_end), scoring_window(self.rec_dir / status.session_id))
        )
        model = parsed.model or self.s.model
        entry["agent"] = {"name": self.s.adapter.name, "version": self.s.agent_version, "model": model}
        entry["attempt"] = self.number
        entry["contaminated"] = status.contaminated
        entry["run"] = {
            "session_id": status.session_id,
            "recording": str(self.rec_dir / status.session_id),
            "ended": state.get("ended"),
            "exit_code": state.get("exit_code"),
            "submitted_by": submitted_by,
            "wall_seconds": wall,
            "agent_seconds": agent_seconds,
            "scoring_seconds": scoring_seconds,
            "overhead_seconds": round(max(0.0, wall - busy), 3),
            "tool_calls": parsed.tool_calls,
            "steps": len(parsed.steps),
            "prompt_tokens": parsed.prompt_tokens,
            "completion_tokens": parsed.completion_tokens,
            "cached_tokens": parsed.cached_tokens,
            "tokens": parsed.token_split(),
            "cost_usd": parsed.cost_usd,
            "trajectory": str(self.dir / "agent" / "trajectory.json"),
            "errors": parsed.errors[:5],
            "prompt": str(self.dir / "agent" / "prompt.txt"),
            "prompt_hash": self.s.prompt.digest,
            "time_limit_seconds": self.s.time_limit,
            "config_hash": self.s.run_config.get("hash"),
        }
        return entry


def _python() -> str:
    return sys.executable


def scoring_window(rec_dir: Path) -> tuple[float, float] | None:
    """From the submission to the last score of a recording (epoch seconds), from its events."""
    start = end = None
    try:
        lines = (rec_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            event = json.loads(line)
            at = parse_iso(str(event.get("t"))).timestamp()
        except (ValueError, AttributeError):
            continue
        if event.get("type") == "submit" and start is None:
            start = at
        elif event.get("type") in ("score", "score_failed"):
            end = at
    return (start, end) if start is not None and end is not None and end >= start else None


def scoring_span(rec_dir: Path) -> float | None:
    window = scoring_window(rec_dir)
    return round(window[1] - window[0], 3) if window else None


def overlap(a: tuple[float, float], b: tuple[float, float] | None) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) if b else 0.0
