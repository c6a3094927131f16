"""The rules of the exercise, written once: `get_task`, `start_task`, the server instructions and
the `solve_task` prompt all read them from here, and what `list_tasks` and `get_task` show of a
task (never its golden tests or solution)."""

from __future__ import annotations

from bridge.sessions.models import TaskSpec, TaskSummary
from bridge.tasks.model import Task


def rules_text(task: Task, *, submit: bool = True) -> str:
    """The rules of the exercise, shown by get_task and the solve_task prompt (`submit=False`: for
    an agent with no MCP client, whose folder the run submits: bridge/agents/adapters/library.py)."""
    text = (
        f"Build the service described in the README of task '{task.id}' ({task.lang}, {task.framework}).\n"
        "Rules:\n"
        "1. Work only inside the session workspace; the README there is the whole specification.\n"
        f"2. The service must listen on 0.0.0.0 port {task.port}.\n"
        "3. Provide requirements.txt (Python dependencies, may be empty) and start.sh at the repository root;\n"
        "   start.sh starts the service in the foreground (it is run as `bash start.sh` from the repo root).\n"
        "4. Do not look for, fetch or write the benchmark's golden tests; they are not available to you.\n"
        "5. Scoring builds your repository in a container without network access at run time: install\n"
        "   everything through requirements.txt.\n"
    )
    if submit:
        text += "6. When you are done, call submit_task once, then poll get_result until the state is done.\n"
    return text


# The server's instructions (no task chosen yet); get_task and the prompt add `rules_text`.
INSTRUCTIONS = """\
RepoGenesis bridge: build a whole web microservice from its README, then get it scored.
Flow:
1. list_tasks, then get_task(task_id) to read the README and the rules.
2. start_task(task_id) opens a recorded session in the workspace (the README is copied there).
3. Work only inside that workspace. Write requirements.txt and a start.sh at the repository
   root; start.sh runs the service in the foreground bound to 0.0.0.0 on the task's port.
4. Do not look for the golden tests: they are not available and are never shown.
5. When done, call submit_task once. It returns at once with a job id while scoring runs
   in the background (containers: this takes minutes).
6. Poll get_result (wait_seconds up to 50) until its state is done or failed.
task_status shows the session; pause_task/resume_task stop/start the working clock;
add_note records a note; quit_task ends the session without scoring.
session_id is optional: a call without it means the session this client started. Pass the
session_id that start_task returned if a call says this client has no session of its own.
"""


def solve_prompt(spec: TaskSpec, rules: str) -> str:
    """The `solve_task` prompt for one task: the flow, then the task's rules."""
    return (
        f"Solve the benchmark task '{spec.id}' ({spec.title}).\n\n"
        f"1. Call start_task with task_id='{spec.id}'. It opens a recorded session and copies the README "
        "into the workspace; the README is the whole specification (also readable as resource "
        f"task://{spec.id}/readme).\n"
        "2. Work only inside that workspace. Write requirements.txt and a start.sh at the repository root; "
        f"start.sh runs the service in the foreground, bound to 0.0.0.0 on port {spec.port}.\n"
        "3. Do not look for the golden tests; they are not available to you.\n"
        "4. When you are done, call submit_task once, then poll get_result (wait_seconds=50) "
        "until its state is done.\n\n"
        f"{rules}"
    )


def task_summary(task: Task) -> TaskSummary:
    """One row of `list_tasks`."""
    return TaskSummary(
        id=task.id,
        title=task.manifest.title,
        lang=task.lang,
        framework=task.framework,
        port=task.port,
        difficulty=task.manifest.difficulty,
    )


def task_spec(task: Task) -> TaskSpec:
    """What `get_task` shows: the summary, the README the agent sees, the rules, the seed files."""
    return TaskSpec(
        **task_summary(task).model_dump(),
        readme=task.readme,
        rules=rules_text(task),
        seed_files=sorted(task.seed_files),
    )
