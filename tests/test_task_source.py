"""One vocabulary for where tasks come from (issue 37): `--task-dir DIR` is the folder and
`--dataset DIR` the checkout on every verb, `--tasks ID ...` the task ids (`run`); the old
`--tasks DIR` and `serve --attempts N` still work for one release, with a warning."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bridge.agents.confine.protected import protected_paths, source_of
from bridge.cli import build_parser
from bridge.commands.common import TaskSource
from mcp_server.cli import passthrough_args

REPO_ROOT = Path(__file__).resolve().parent.parent
TASKS = REPO_ROOT / "tasks"

# every verb that takes a task source, as `rgbridge` words
SOURCE_VERBS = [
    ["serve"],
    ["ide-config", "cursor", "--workspace", "/ws"],
    ["evaluate", "--predictions-dir", "/p"],
    ["conformance"],
    ["tasks", "list"],
    ["score", "/repo", "--task", "kv-ledger"],
    ["session", "start", "--task", "kv-ledger", "--workspace", "/ws"],
]


def _parse(words: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(words)


@pytest.mark.parametrize("verb", SOURCE_VERBS, ids=lambda v: " ".join(v[:2]))
def test_every_verb_takes_task_dir_and_the_old_tasks_dir_with_a_warning(
    verb: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    new = _parse([*verb, "--task-dir", str(TASKS), "--dataset", "/ds"])
    assert TaskSource.from_args(new) == TaskSource(TASKS, Path("/ds"))
    assert "deprecated" not in capsys.readouterr().err
    old = _parse([*verb, "--tasks", str(TASKS)])
    assert TaskSource.from_args(old) == TaskSource(TASKS, None)
    err = capsys.readouterr().err
    assert "--tasks DIR is deprecated: use --task-dir DIR" in err and len(err.strip().splitlines()) == 1


def test_run_takes_task_ids_and_the_task_dir(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["run", "--agent", "command", "--tasks", "kv-ledger", "word-duel", "--task-dir", str(TASKS)])
    assert args.tasks == ["kv-ledger", "word-duel"] and TaskSource.from_args(args).task_dir == TASKS
    assert "deprecated" not in capsys.readouterr().err


def test_serve_submissions_limit_has_its_own_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert _parse(["serve", "--max-submissions", "3"]).max_submissions == 3
    assert _parse(["serve"]).max_submissions == 1
    assert "deprecated" not in capsys.readouterr().err
    assert _parse(["serve", "--attempts", "2"]).max_submissions == 2
    assert "--attempts is deprecated here: use --max-submissions N" in capsys.readouterr().err


def test_the_server_gets_the_same_source_and_the_agent_never_sees_it(tmp_path: Path) -> None:
    source = TaskSource(TASKS, tmp_path / "ds")
    args = source.server_args()
    assert args == ["--task-dir", str(TASKS), "--dataset", str(tmp_path / "ds")]
    assert source_of(args) == (TASKS, tmp_path / "ds")
    assert source_of(["--tasks", str(TASKS)]) == (TASKS, None)  # run.json of a run before --task-dir
    protected = protected_paths(args, [], tmp_path / "rec", tmp_path / "out")
    assert TASKS in protected and tmp_path / "ds" in protected
    ide = _parse(["ide-config", "cursor", "--workspace", "/ws", "--task-dir", str(TASKS), "--recordings", "/r"])
    assert passthrough_args(ide) == ["--task-dir", str(TASKS), "--recordings", "/r"]
