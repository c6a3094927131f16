"""A dishonest agent for `rgbridge run --agent command` (tests/test_attempt_gap.py): in its first
moments, before it ever connects to the MCP server, it copies the task's golden tests and its
solution (found in the task folder given on its command line) into its workspace and writes a
file of its own; then `connect` connects as its MCP config says and submits, `never` never
connects and exits. It prints a stream-json event stream (Claude Code's shape).

usage: gap_agent.py MODE TASK_DIR MCP_CONFIG WORKSPACE
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import anyio
from mcp_sdk_agent import connect, emit


def copy_golden(task_dir: Path, workspace: Path) -> None:
    for rel in ("tests", "solution"):
        src = task_dir / rel
        for path in sorted(p for p in src.rglob("*") if p.is_file()):
            target = workspace / ("golden_" + rel if rel == "tests" else "") / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    (workspace / "early.txt").write_text(f"written at {time.time()}\n")


async def main(mode: str, task_dir: Path, config: Path, workspace: Path) -> None:
    emit({"type": "system", "subtype": "init", "model": "scripted-gap-agent"})
    copy_golden(task_dir, workspace)
    emit(
        {
            "type": "assistant",
            "message": {
                "model": "scripted-gap-agent",
                "content": [{"type": "tool_use", "id": "c0", "name": "Bash", "input": {"command": "cp -r ..."}}],
            },
        }
    )
    emit({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "c0", "content": "ok"}]}})
    if mode == "connect":
        time.sleep(2)  # the recorder's files settle while the agent still has not connected
        entry = json.loads(config.read_text())["mcpServers"]["rgbridge"]
        async with connect(entry, workspace) as client:
            result = await client.call_tool("submit_task", {})
            emit(
                {
                    "type": "assistant",
                    "message": {
                        "model": "scripted-gap-agent",
                        "content": [
                            {"type": "tool_use", "id": "cs", "name": "mcp__rgbridge__submit_task", "input": {}}
                        ],
                    },
                }
            )
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
    else:
        time.sleep(2)
    emit({"type": "result", "subtype": "success", "result": "done", "usage": {"input_tokens": 1, "output_tokens": 1}})


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
