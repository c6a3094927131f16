"""One attempt of an agent on a task, owned by the run from start to score.

1. A fresh attempt folder: the workspace, the agent's own HOME and TMPDIR, its recordings folder.
2. The run starts the attempt's MCP server (bridge/agents/attempt/server.py), outside the agent's
   process tree: it opens the session itself and holds it, recorder and golden-file watch running,
   so the session starts before the agent does and does not wait for the agent to connect or to
   call start_task; the agent reaches it over HTTP on loopback with its own credential.
3. The agent runs in its sandbox (`--sandbox`, bridge/agents/confine/: it sees its workspace, HOME,
   TMPDIR, its CLI and the system's libraries, nothing else) until it exits, the time limit or a
   resource limit ends it, the model gateway ends it (the key refused, `--max-cost` spent) or
   the run stops; all of its processes are gone when it returns. Its model calls go through the
   run's gateway (bridge/agents/gateway/) with a placeholder credential revoked at its end.
4. Then the run ends the server (the session is let go; a submitted one's scoring process carries
   on), re-attaches the session, records what the agent did (`agent_run`, its stream and ATIF
   trajectory in the recording) and, if the agent did not submit, submits the workspace as it
   is (`time_limit` or `agent_exit`; `--on-exit abandon` quits instead), then waits for the score.
   From the session's start to the agent's end exactly one bridge process owned the session.

Nothing depends on the agent behaving: an agent that submitted has its score finished (a job
its server left is resumed), one that did not is submitted for it, one that hangs is cut.

Why this module is long: the attempt's whole life, from its folder to its row, reads top to
bottom in one place; what the wire adds to it (the door, the verdict, the row's numbers) lives in
bridge/agents/gateway/door.py and rows.py.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from bridge.agents.adapters.base import AttemptSetup, HttpServer, Launch
from bridge.agents.adapters.events import ParsedRun, read_stream
from bridge.agents.adapters.failures import Failure
from bridge.agents.attempt.rows import AttemptFacts, attempt_row
from bridge.agents.attempt.server import AttemptServer
from bridge.agents.attempt.state import AttemptState
from bridge.agents.attempt.timing import scoring_span
from bridge.agents.attempt.trajectory import keep_trajectory, to_atif
from bridge.agents.confine import Confinement, confinement_for, sandbox_for
from bridge.agents.confine.attempt_net import AttemptNetwork, endpoints_for, network_log
from bridge.agents.confine.process import Ended, run_agent
from bridge.agents.confine.protected import protected_paths
from bridge.agents.gateway.door import Door, attempt_door
from bridge.agents.gateway.rows import attempt_failure, steps_or_wire
from bridge.agents.run.settings import RunSettings
from bridge.errors import BridgeError
from bridge.fs.files import write_json_atomic
from bridge.recording.integrity import try_seal
from bridge.recording.wire_transcript import PATH as WIRE_TRANSCRIPT
from bridge.scoring.run.report_row import ReportRow
from bridge.sessions.live import load_record
from bridge.sessions.manager import SessionManager
from bridge.sessions.models import ResultStatus, SessionRecord, Signal, result_status
from bridge.sessions.ownership import held_elsewhere
from bridge.sessions.settings import SessionSettings
from bridge.tasks.model import Task

STATE_FILE = "state.json"
LOCK_WAIT_SECONDS = 3600.0  # a scoring job the agent's server handed on may hold the session
SCORE_POLL_SECONDS = 2.0
#: how long a submitted job may wait, held by no process, for its scoring process to take it up
HANDOVER_SECONDS = 60.0


class Stopped(BridgeError):
    """The run was stopped (Ctrl-C) while this attempt ran; `--resume` picks it up."""


class Abandoned(BridgeError):
    """The agent ended without submitting and `--on-exit abandon` quit its session: no score."""


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
        self.settings = settings
        self.task = task
        self.number = number
        self.stop = stop
        self.key = attempt_key(task.id, number)
        self.dir = settings.output_dir / "attempts" / task.id / f"a{number}"
        self.rec_dir = settings.recordings / settings.run_id / task.id / f"a{number}"
        self.workspace = self.dir / "workspace"
        self.live = Live(workspace=self.workspace, stream=self.dir / "agent" / "stream.jsonl")
        self.door: Door | None = None  # its way to the model (bridge/agents/gateway/door.py)

    # ------------------------------------------------------------------ state on disk
    def state(self) -> AttemptState:
        return AttemptState.load(self.dir / STATE_FILE)

    def _save(self, **fields: Any) -> None:
        self.state().updated(**fields).save(self.dir / STATE_FILE)

    def _manager(self, *, reattach: bool) -> SessionManager:
        return SessionManager(
            self.settings.catalog,
            recordings_dir=self.rec_dir,
            settings=SessionSettings(
                profile=cast(Any, self.settings.profile),
                reattach=reattach,
                run_id=self.settings.run_id,
                finish_jobs_at_exit=False,
            ),
        )

    # ------------------------------------------------------------------ the attempt
    def run(self) -> ReportRow:
        """The attempt to its report row (resuming whatever an earlier run left)."""
        state = self.state()
        if state.session_id and state.phase in ("agent_done", "submitted"):
            return self._finish(state.session_id, None, None)
        self._clear_unfinished()
        self.live.state = "starting"
        self.live.started = time.monotonic()
        for sub in ("workspace", "home", "tmp", "agent"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self._save(phase="starting", started_at=time.time())
        confinement = self._confinement()  # a refused bind fails the attempt before its session opens
        server = self._start_server()
        sid = server.ready.session_id
        self.door = attempt_door(
            self.settings.adapter,
            self.settings.gateway,
            self.settings.model_base_url,
            self.key,
            self.settings.time_limit,
            self.dir / "agent",
            self.settings.cost,
        )
        try:
            self._save(phase="running", session_id=sid, server_seconds=server.ready_seconds)
            ended, parsed, sandbox = self._run_agent(server, confinement)
            agent_ended_at = time.time()
        finally:
            # the agent's processes are all gone (or it never started): the session is let go
            if self.door is not None:  # and its placeholder refused
                self.door.close()
            lost, ending = server.lost(), time.monotonic()
            server.end()
            self._save(server_end_seconds=round(time.monotonic() - ending, 3), server_lost=lost)
        self._save(
            # a run stopped mid-agent redoes the attempt on resume; an ended agent's work is scored
            phase="stopped" if ended.how == "stopped" else "agent_done",
            ended=ended.how,
            exit_code=ended.exit_code,
            agent_seconds=ended.seconds,
            agent_ended_at=agent_ended_at,
            sandbox=sandbox,
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

    def _start_server(self) -> AttemptServer:
        """The attempt's MCP server, its session open and held (Stopped if the run stops first)."""
        server_dir = self.dir / "server"
        options = {
            "--transport": "http",
            "--host": "127.0.0.1",
            "--port": "0",  # a free port, read back from the ready file
            "--workspace": str(self.workspace),
            "--recordings": str(self.rec_dir),
            "--run-id": self.settings.run_id,
            "--profile": self.settings.profile,
            "--start-task": self.task.id,
            "--client-name": self.settings.adapter.name,
            "--client-version": self.settings.agent_version,
            "--ready-file": str(server_dir / "ready.json"),
        }
        python = self.settings.server_env.get("RGBRIDGE_PYTHON", "") or _python()
        argv = [python, "-m", "mcp_server", *[w for pair in options.items() for w in pair], *self.settings.server_args]
        env = {k: v for k, v in self.settings.server_env.items() if k != "RGBRIDGE_PYTHON"}
        server = AttemptServer.start(
            argv, env=env, ready_file=server_dir / "ready.json", stderr=server_dir / "stderr.log", stop=self.stop
        )
        if server is None:
            raise Stopped(f"{self.key}: stopped")
        return server

    def setup(self, server: HttpServer) -> AttemptSetup:
        return AttemptSetup(
            binary=self.settings.binary,
            prompt=self.settings.prompt.render(self.task, self.settings.time_limit),
            workspace=self.workspace,
            home=self.dir / "home",
            tmp=self.dir / "tmp",
            server=server,
            model=self.settings.model,
            model_base_url=self.settings.model_base_url,
            agent_cmd=self.settings.agent_cmd,
            confined=self.settings.sandbox != "none",
            door=self.door.access() if self.door is not None else None,
        )

    def _run_agent(self, server: AttemptServer, confinement: Confinement) -> tuple[Ended, ParsedRun, dict[str, Any]]:
        setup = self.setup(HttpServer(server.ready.url, server.ready.credential))
        launch = self.settings.adapter.build(setup)
        for path, text in launch.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            path.chmod(0o600)  # the agent's credential is in its MCP config
        # what the agent was given and under which configuration, kept with its stream (and recording)
        (self.dir / "agent" / "prompt.txt").write_text(setup.prompt, encoding="utf-8")
        write_json_atomic(self.dir / "agent" / "run_config.json", self.settings.run_config)
        self.live.state = "agent"
        # --network (bridge/agents/confine/network.py): the doors open before the agent, close after it
        # the model door: the gateway's (the agent never reaches the provider itself), else a loopback endpoint
        model_url = self.door.url if self.door is not None else self.settings.model_base_url
        doors = endpoints_for(server.ready.url, model_url)
        with AttemptNetwork(self.settings.network, self.settings.allow_hosts, doors) as net:
            launch.env.update(net.env)
            ended, sandbox = self._confined_run(launch, net.confine(confinement))
            sandbox["network"] = net.keep(self.dir / "agent" / "network.json")
        parsed = self.settings.adapter.parse(read_stream(self.dir / "agent" / "stream.jsonl"), setup.prompt)
        return ended, parsed, sandbox

    def _confinement(self) -> Confinement:
        """What the agent may see (bridge/agents/confine/), checked against what the bridge protects."""
        program = self.settings.adapter.program(self.settings.binary, self.settings.agent_cmd)
        confinement = confinement_for(
            workspace=self.workspace,
            home=self.dir / "home",
            tmp=self.dir / "tmp",
            program=program,
            agent_binds=self.settings.agent_binds,
            protected=protected_paths(
                self.settings.server_args, self.settings.catalog, self.settings.recordings, self.settings.output_dir
            ),
            limits=self.settings.limits,
        )
        (self.settings.confiner or sandbox_for("none")).describe(confinement)  # SandboxError on a refused bind
        return confinement

    def _confined_run(self, launch: Launch, confinement: Confinement) -> tuple[Ended, dict[str, Any]]:
        """The agent's processes, confined as `--sandbox` says; how they were (the row's
        run.sandbox). Every process of the agent is gone when this returns."""
        sandbox = self.settings.confiner or sandbox_for("none")
        ended = run_agent(
            launch.argv,
            env=launch.env,
            cwd=launch.cwd or self.workspace,
            stdout=self.dir / "agent" / "stream.jsonl",
            stderr=self.dir / "agent" / "stderr.log",
            time_limit=self.settings.time_limit,
            stop=self.stop,
            sandbox=sandbox,
            confinement=confinement,
            cut=self.door.ended if self.door is not None else None,
        )
        how = ended.confinement
        row = {"kind": sandbox.kind, "version": str(how.get("version", "")), "confined": sandbox.kind != "none"}
        row["limits"] = how.get("limits") or {}
        if ended.limit:
            row["limit_hit"] = ended.limit
        # the recording says how the attempt was confined (kind, version, binds, limits)
        write_json_atomic(self.dir / "agent" / "confinement.json", how)
        return ended, row

    # ------------------------------------------------------------------ after the agent
    def _finish(self, sid: str, ended: Ended | None, parsed: ParsedRun | None) -> ReportRow:
        self.live.state = "scoring"
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        if not self._released(sid, deadline):  # a scoring job the attempt's server handed on
            if self.stop.is_set():
                raise Stopped(f"{self.key}: stopped")
            raise BridgeError(f"{self.key}: session {sid} is still held by another process")
        mgr = self._manager(reattach=True)
        try:
            if sid not in mgr.sessions and load_record(self.rec_dir / sid).state in ("active", "paused"):
                mgr.attach(sid)
            live = sid in mgr.sessions  # else finished on disk: the agent's server scored it
            state = self.state()
            prompt = self.settings.prompt.render(self.task, self.settings.time_limit)
            if parsed is None:  # resumed after the agent ended: read its stream again
                parsed = self.settings.adapter.parse(read_stream(self.dir / "agent" / "stream.jsonl"), prompt)
            parsed = steps_or_wire(parsed, self.dir / WIRE_TRANSCRIPT, prompt)
            how = ended.how if ended else (state.ended or "exit")
            # cut by the clock or by a resource limit, the agent's work is still scored as it stands
            signal: Signal = "time_limit" if how == "time_limit" else "agent_exit"
            if how in ("resource_limit", "cost_limit"):  # a limit hit (cost: the gateway's --max-cost)
                signal = cast(Signal, how)
            scoring_started = time.monotonic()
            if live and mgr.status(sid).state in ("active", "paused"):
                self._keep_trajectory(mgr, sid, parsed, how, state)
                failure = attempt_failure(self.door, parsed, how, state.exit_code, self.dir / "agent" / "stderr.log")
                if failure is not None:  # the CLI failed, the agent did not: nothing is scored
                    mgr.quit(sid, f"agent_error ({failure.cls}): {failure.message}")
                    self._save(phase="agent_error", agent_error=failure.as_dict(0))
                    self.live.state = f"agent_error ({failure.cls})"
                    self.live.ended = time.monotonic()
                    return self._entry(result_status(*self._on_disk(sid)), parsed, "agent_error", 0.0, failure)
                if self.settings.on_exit == "abandon" and signal == "agent_exit":
                    mgr.quit(sid, "the agent ended without submitting (--on-exit abandon)")
                    self._save(phase="abandoned")
                    raise Abandoned(f"{self.key}: abandoned (the agent ended without submitting)")
                mgr.submit(sid, signal=signal)
                submitted_by: str = signal
            else:
                submitted_by = "agent"
            self._save(phase="submitted", submitted_by=submitted_by)
            result = self._wait_result(mgr, sid) if live else scored_on_disk(self.rec_dir / sid, self.stop, deadline)
            scoring_seconds = scoring_span(self.rec_dir / sid) or round(time.monotonic() - scoring_started, 3)
            if submitted_by == "agent":
                # The agent submitted: its recording was sealed without the agent's files; add them
                # and seal again (the seal covers every file of the recording). The detached scoring
                # process seals after its result shows: ours must come after its, never beside it.
                self._released(sid, deadline)
                self._keep_trajectory(mgr, sid, parsed, how, state, record_event=False)
                try_seal(self.rec_dir / sid)
        finally:
            mgr.close()
        entry = self._entry(result, parsed, submitted_by, scoring_seconds)
        self._save(phase="scored", scoring_seconds=scoring_seconds)
        self.live.state = "done"
        self.live.ended = time.monotonic()
        return entry

    def _released(self, sid: str, deadline: float) -> bool:
        """Wait until no other process holds the recording; False if stopped or past `deadline` first."""
        while held_elsewhere(self.rec_dir / sid):
            if self.stop.is_set() or time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def _keep_trajectory(
        self,
        mgr: SessionManager,
        sid: str,
        parsed: ParsedRun,
        how: str,
        state: AttemptState,
        *,
        record_event: bool = True,
    ) -> None:
        """The CLI's own stream and its ATIF trajectory, in the recording and the attempt folder."""
        atif = to_atif(
            parsed,
            session_id=sid,
            agent=self.settings.adapter.name,
            version=self.settings.agent_version,
            extra={"task": self.task.id, "attempt": self.number, "ended": how, "run_id": self.settings.run_id},
        )
        keep_trajectory(atif, self.dir / "agent", self.rec_dir / sid / "agent")
        if record_event:
            # the session this process holds: its event log takes the typed `agent_run` record
            mgr.sessions[sid].events.append(
                "agent_run",
                agent=self.settings.adapter.name,
                version=self.settings.agent_version,
                model=parsed.model or self.settings.model,
                ended=how,
                exit_code=state.exit_code,
                agent_seconds=state.agent_seconds or 0.0,
                tool_calls=parsed.tool_calls,
                steps=len(parsed.steps),
                trajectory="agent/trajectory.json",
            )
            for asked in network_log(self.dir / "agent" / "network.json"):
                mgr.sessions[sid].events.append("network_request", **asked)

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
    ) -> ReportRow:
        return attempt_row(
            AttemptFacts(self.settings, self.task, self.number, self.state(), self.dir, self.rec_dir, self.door),
            status,
            parsed,
            submitted_by,
            scoring_seconds,
            failure,
        )


def _python() -> str:
    return sys.executable


def scored_on_disk(rec: Path, stop: threading.Event, deadline: float) -> ResultStatus:
    """The result of a session another process scores: the agent submitted through its own server,
    which handed the job to a scoring process of its own (bridge/sessions/score_process.py). That
    process takes the recording up a moment after the server lets it go, so the job is read again
    while it is queued or running, or while a process holds the recording (the scorer seals after
    its result shows), and given up only past `deadline` or when no process takes it up within
    HANDOVER_SECONDS: the row then says how the job stood."""
    unheld_since: float | None = None
    while True:
        status = result_status(load_record(rec), rec)
        held = held_elsewhere(rec)
        if status.state not in ("queued", "running") and not held:
            return status
        now = time.monotonic()
        unheld_since = None if held else (unheld_since if unheld_since is not None else now)
        if now > deadline or (unheld_since is not None and now - unheld_since > HANDOVER_SECONDS):
            return status
        if stop.wait(0.2):
            raise Stopped(f"{rec.name}: stopped while scoring")
