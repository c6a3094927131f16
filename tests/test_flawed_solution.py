"""A real flawed solution scored in Docker explains itself (issue 24, done-when): the kv-ledger
oracle with its history route renamed fails the golden history test with a 404; `rgbridge score`
prints that test's node id and its assertion line, and the HTML report's per-test table holds
them (checked in headless Chromium)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bridge.cli import main
from bridge.reports.html import write_html
from tests.helpers import run_chromium

pytestmark = pytest.mark.docker

HISTORY_TEST = "tests/test_listing.py::test_history_lists_every_version_oldest_first"
ROUTE = '@app.get("/api/v1/keys/{key}/history")'


def test_flawed_solution_names_its_failing_tests(
    docker_client,
    tasks_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    chromium: str,  # noqa: F811
) -> None:
    repo = tmp_path / "flawed"
    shutil.copytree(tasks_dir / "kv-ledger" / "solution", repo)
    app = repo / "app.py"
    source = app.read_text()
    assert ROUTE in source
    app.write_text(source.replace(ROUTE, '@app.get("/api/v1/keys/{key}/log")  # README: /api/v1/keys/{key}/history'))
    out = tmp_path / "out"
    code = main(
        [
            "score",
            str(repo),
            "--task",
            "kv-ledger",
            "--task-dir",
            str(tasks_dir),
            "--output-dir",
            str(out),
            "--no-cache",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "kv-ledger: why not full marks" in printed
    flat = " ".join(printed.split())
    assert f"failed {HISTORY_TEST} [strict, compat] — E assert 404 == 200" in flat, printed

    page = write_html(out, tmp_path / "flawed.html")
    dom = run_chromium(chromium, tmp_path / "profile", "--dump-dom", page.as_uri()).stdout.decode()
    tables = dom.split('<table class="tests">')[1:]
    assert len(tables) == 2  # compat and strict
    for table in tables:
        body = table.split("</table>", 1)[0]
        assert HISTORY_TEST in body and "assert 404 == 200" in body
