"""No silent zero (issue 24, item 4): unknown names exit non-zero with close names, numeric options
are refused one way everywhere, and an HTTP server that cannot bind says so first."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.cli import main
from bridge.tasks.catalog import close_names

REPO = Path(__file__).resolve().parent.parent


def test_close_names_ignore_case_and_separators() -> None:
    known = ["kv-ledger", "word-duel", "library-api", "tic-tac-toe"]
    assert close_names("TicTacToe", known) == ["tic-tac-toe"]
    assert close_names("word_duel", known)[0] == "word-duel"
    assert close_names("zzzzzz", known) == []


def test_evaluate_on_unknown_names_fails_with_a_suggestion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    preds = tmp_path / "preds"
    (preds / "WordDuel").mkdir(parents=True)
    (preds / "[red]x").mkdir()
    assert main(["evaluate", "--predictions-dir", str(preds), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "no folder names a known task" in err and "WordDuel; did you mean 'word-duel'?" in " ".join(err.split())
    assert "[red]x" in err  # a folder name is shown as text, not markup
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("report_*.json"))
    (preds / "WordDuel").rmdir()
    (preds / "word-duel").mkdir()
    args = [
        "evaluate",
        "--predictions-dir",
        str(preds),
        "--repo-names",
        "wordduel",
        "--output-dir",
        str(tmp_path / "o"),
    ]
    assert main(args) == 2
    assert "unknown task 'wordduel'; did you mean 'word-duel'?" in " ".join(capsys.readouterr().err.split())


def test_unknown_task_ids_get_suggestions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "show", "kvledger"]) == 2
    assert "did you mean 'kv-ledger'?" in capsys.readouterr().err
    assert main(["plan", "library_api"]) == 2
    assert "did you mean 'library-api'?" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "--predictions-dir", ".", "--workers"],
        ["curve", "REC", "--workers"],
        ["curve", "REC", "--points"],
        ["conformance", "--dataset", ".", "--workers"],
        ["serve", "--max-submissions"],
        ["serve", "--attempts"],  # the old name, deprecated
    ],
)
def test_numeric_options_refused_alike(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    messages = []
    for bad in ("0", "-1", "two"):
        with pytest.raises(SystemExit) as exc:
            main([*argv, bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        messages.append(err.replace(repr(bad), "N"))
    assert len(set(messages)) == 1 and "must be a whole number at least 1, not N" in messages[0]


def test_serve_on_a_busy_port_says_so_first(tmp_path: Path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO), "RGBRIDGE_RECORDINGS": str(tmp_path / "rec")}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bridge.cli", "serve", "--transport", "http", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
    finally:
        busy.close()
    assert proc.returncode == 2 and proc.stdout == ""
    first = proc.stderr.splitlines()[0]
    assert first == f"error: cannot listen on 127.0.0.1:{port}: already in use; choose another port with --port N"
    assert "token" not in proc.stderr and "serving" not in proc.stderr


def test_tasks_list_shows_scorable_and_show_gives_the_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "list"]) == 0
    out = capsys.readouterr().out
    assert "scorable" in out and " yes " in out
    assert main(["tasks", "show", "kv-ledger"]) == 0
    out = capsys.readouterr().out
    assert "rules the agent is given" in out and "port 8090" in out
    assert main(["tasks", "show", "kv-ledger", "--json"]) == 0
    import json

    assert "submit_task" in json.loads(capsys.readouterr().out)["rules"]
