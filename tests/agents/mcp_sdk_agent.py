"""A scripted agent built on a third-party MCP client (the `mcp` SDK's own Client), for
`rgbridge run --agent command`. It reads the MCP config the run wrote ({mcp_config}) and connects
as it says (the attempt's server over streamable HTTP with its bearer token, or a stdio server it
launches), writes the files of a payload into the workspace and then, by mode:
`solve` submits, `exit` ends without submitting, `hang` never ends; `solve-by-task` takes the
files of the open session's task from a payload of {task: files}. With MCP_SDK_AGENT_HOLD set
(a runner passes the agent only an allow-list of its environment: set it in the command, `env
MCP_SDK_AGENT_HOLD=FILE python ...`), every `solve` after the first emits a `held` system event and
then waits while FILE exists (an attempt certainly in flight, for a test to interrupt). It prints a
stream-json event stream (Claude Code's shape) so the run can build its trajectory.

usage: mcp_sdk_agent.py MODE PAYLOAD.json MCP_CONFIG WORKSPACE
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import anyio
import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def write_files(files: dict[str, str], workspace: Path, first_id: int) -> None:
    for i, (rel, text) in enumerate(sorted(files.items()), start=first_id):
        target = workspace / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        emit(
            {
                "type": "assistant",
                "message": {
                    "model": "scripted-mcp-sdk",
                    "content": [{"type": "tool_use", "id": f"c{i}", "name": "Write", "input": {"file_path": rel}}],
                },
            }
        )
        emit(
            {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": f"c{i}", "content": "ok"}]}}
        )


def connect(entry: dict, workspace: Path) -> Client:
    """An MCP client for our server's config entry: HTTP (url + headers) or stdio (command)."""
    if "url" in entry:
        http = httpx2.AsyncClient(headers=entry.get("headers") or {}, timeout=httpx2.Timeout(30, read=120))
        return Client(streamable_http_client(entry["url"], http_client=http), mode="legacy")
    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], env=entry.get("env"), cwd=str(workspace)
    )
    return Client(stdio_client(params), mode="legacy")


async def main(mode: str, payload: Path, config: Path, workspace: Path) -> None:
    files = json.loads(payload.read_text())
    entry = json.loads(config.read_text())["mcpServers"]["rgbridge"]
    emit({"type": "system", "subtype": "init", "model": "scripted-mcp-sdk"})
    if mode == "hang":  # the files first: what the time limit submits must not wait for the server
        write_files(files, workspace, 2)
    async with connect(entry, workspace) as client:
        tools = await client.list_tools()
        emit(
            {
                "type": "assistant",
                "message": {
                    "model": "scripted-mcp-sdk",
                    "content": [
                        {"type": "text", "text": f"{len(tools.tools)} tools"},
                        {"type": "tool_use", "id": "c1", "name": "mcp__rgbridge__task_status", "input": {}},
                    ],
                },
            }
        )
        status = await client.call_tool("task_status", {})
        emit(
            {
                "type": "user",
                "message": {
                    "content": [
                        {"type": "tool_result", "tool_use_id": "c1", "content": json.dumps(status.structured_content)}
                    ]
                },
            }
        )
        if mode == "solve-by-task":
            files, mode = files[status.structured_content["task_id"]], "solve"
        if mode != "hang":
            write_files(files, workspace, 2)
        if mode == "hang":
            while True:
                time.sleep(1)
        hold = os.environ.get("MCP_SDK_AGENT_HOLD")
        if mode == "solve" and hold:
            first = Path(hold + ".first")
            if first.exists():
                emit({"type": "system", "subtype": "held"})  # in the run's stream.jsonl: what a test waits for
                while Path(hold).exists():
                    time.sleep(0.2)
            first.write_text("")
        if mode == "solve":
            emit(
                {
                    "type": "assistant",
                    "message": {
                        "model": "scripted-mcp-sdk",
                        "content": [
                            {"type": "tool_use", "id": "cs", "name": "mcp__rgbridge__submit_task", "input": {}}
                        ],
                    },
                }
            )
            result = await client.call_tool("submit_task", {})
            emit(
                {
                    "type": "user",
                    "message": {
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "cs",
                                "content": json.dumps(result.structured_content),
                            }
                        ]
                    },
                }
            )
    emit(
        {
            "type": "result",
            "subtype": "success",
            "result": "done",
            "total_cost_usd": 0.0,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
