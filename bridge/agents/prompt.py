"""The one prompt an agent gets (`rgbridge run --show-prompt`): the bridge's instructions for a
session the run has already opened, then the task's README and the rules (bridge/sessions/rules.py)."""

from __future__ import annotations

from bridge.agents.mcp_configs import SERVER_KEY
from bridge.sessions.rules import rules_text
from bridge.tasks.model import Task


def agent_prompt(task: Task) -> str:
    return (
        f"You are solving the benchmark task '{task.id}' ({task.manifest.title}) unattended.\n"
        f"A recorded session for it is already open in your current working folder, the workspace; the "
        f"'{SERVER_KEY}' MCP server's tools act on it (start_task is not needed: it answers that the session "
        "is open). Write the whole service into this folder with your own file tools.\n"
        "When the service is complete, call the MCP tool submit_task once, then stop; scoring runs after you "
        "finish. If you stop without submitting, the folder is submitted as you left it.\n\n"
        f"{rules_text(task)}\n"
        "The task's README (the whole specification) follows.\n\n"
        f"{task.readme}"
    )
