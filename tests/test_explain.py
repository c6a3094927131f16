"""Every score explains itself (tests not passed with their message lines, static/dynamic AC
disagreement) and `rgbridge report` reads every kind of output folder (issue 24, items 1-2).

The flawed solution here is synthetic: the kv-ledger sample's result with one golden test failing
the way a renamed route fails (`E assert 404 in [200, 204]`) and static AC still counting the
route from a comment; a Docker test at the end scores a real flawed copy of the oracle.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from bridge.cli import main
from bridge.reports.html import write_html
from bridge.scoring import upstream
from bridge.scoring.explanations import ac_disagreement, explain_lines, message_line
from bridge.scoring.result import summarize_result
from bridge.scoring.run.reporting import RunWriter
from tests.helpers import COMPAT_LOG, FAILING, LONGREPR, MARKUP, SAMPLE, decode_png, flawed_result, run_chromium


@pytest.fixture(scope="module")
def score_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("score")
    (out / "result.json").write_text(flawed_result().model_dump_json(indent=2))
    return out


def test_message_line_picks_the_explaining_line() -> None:
    assert message_line(LONGREPR) == "E assert 404 in [200, 204]"
    trace = "self = <X>\n    raise ConnectionError(e)\nrequests.exceptions.ConnectionError: refused\n"
    assert message_line(trace) == "requests.exceptions.ConnectionError: refused"
    assert message_line("self = <X>\nexpected:<200> but was:<404>") == "expected:<200> but was:<404>"
    custom = 'E       AssertionError: {"code": "not_found"}\nE       assert 404 == 400\nE        +  where 404 = x'
    assert message_line(custom) == "E assert 404 == 400"
    assert message_line("E   KeyError: 'versions'") == "E KeyError: 'versions'"
    assert message_line("") == "" and message_line("a\x1b[31mred") == "a\\x1b[31mred"
    assert len(message_line("E " + "x" * 5000)) == 200


def test_compat_tests_from_log() -> None:
    tests = {t.nodeid: t for t in upstream.tests_from_log(COMPAT_LOG)}
    assert tests["tests/test_keys.py::test_put_creates"].outcome == "passed"
    assert tests[FAILING].outcome == "failed" and message_line(tests[FAILING].message) == "E assert 404 in [200, 204]"
    cut = upstream.tests_from_log(f"{FAILING} FAILED [100%]\nFAILED {FAILING} - assert 404 in [200...\n")
    assert cut[0].message == "assert 404 in [200..."  # no section: the summary's (cut) message


def test_explanation_names_tests_and_disagreement() -> None:
    profiles = flawed_result().model_dump(mode="json")["profiles"]
    lines = explain_lines(profiles)
    assert lines[0].startswith("error tests/") and MARKUP in lines[0]
    assert f"failed {FAILING} [strict, compat] — E assert 404 in [200, 204]" in lines
    found = ac_disagreement(profiles)
    assert found is not None and not found.dynamic_only
    assert found.static_only == ("GET /api/v1/keys/{key}/history (static: app.py; probe 404: 404: no route)",)
    # capped, with the rest counted
    many = {"strict": {"tests": [{"nodeid": f"t::{i}", "outcome": "failed", "message": "E boom"} for i in range(25)]}}
    capped = explain_lines(many)
    assert len(capped) == 11 and capped[-1] == "… and 15 more"


def test_get_result_summary_lists_failures() -> None:
    summary = summarize_result(flawed_result().model_dump(mode="json"))
    assert f"failed {FAILING} — E assert 404 in [200, 204]" in summary["strict"]["failed_tests"]
    assert f"failed {FAILING} — E assert 404 in [200, 204]" in summary["compat"]["failed_tests"]
    assert summary["strict"]["ac_disagreement"][0].startswith("static AC counts, the running service does not serve")


def test_score_terminal_output(score_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(score_dir)]) == 0
    out = capsys.readouterr().out
    assert "33/35" in out and "kv-ledger: why not full marks" in out
    assert FAILING in out and "E assert 404 in [200, 204]" in out
    assert MARKUP in out  # rich markup in a message is shown literally
    assert "static AC counts, the running service does not serve" in out


def _four_kinds(tmp: Path, score_dir: Path) -> dict[str, Path]:
    ev = tmp / "eval"
    writer = RunWriter(ev, "2026-03-01_10-00-00")
    writer.record(flawed_result())
    writer.finalize({"predictions_dir": "preds", "model_name": "m"})
    run = tmp / "run"
    writer = RunWriter(run, "2026-03-01_11-00-00")
    writer.record(flawed_result())
    writer.finalize({"agent": "codex", "model_name": "gpt-x", "attempts": 1})
    return {"score": score_dir, "evaluate": ev, "run": run, "recording": SAMPLE}


def test_report_reads_every_kind_of_folder(score_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for kind, folder in _four_kinds(tmp_path, score_dir).items():
        assert main(["report", str(folder)]) == 0, kind
        out = capsys.readouterr().out
        assert "Pass@1" in out, kind
        if kind == "recording":
            assert "working time 0:00:29" in out and "in 1 pause(s)" in out
            assert 'adding <history> & counters — "done" soon' in out  # the note
            assert "signal: submitted via mcp" in out and "35/35" in out
        else:
            assert FAILING in out and "E assert 404 in [200, 204]" in out, kind
        assert main(["report", str(folder), "--html", str(tmp_path / f"{kind}.html")]) == 0
        capsys.readouterr()
        assert main(["report", str(folder), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["results"], kind
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "result.json (a score --output-dir folder)" in capsys.readouterr().err


def test_reference_charts(score_dir: Path, tmp_path: Path) -> None:
    # A synthetic leaderboard in upstream's results.json schema (never the real RepoGenesis file).
    fixture = Path(__file__).parent / "fixtures" / "leaderboard" / "results.json"
    rows = json.loads(fixture.read_text())
    ref = tmp_path / "results.json"
    ref.write_text(json.dumps(rows))
    page = write_html(score_dir, tmp_path / "r.html", reference=ref).read_text()
    assert page.count('aria-label="Pass@1"') == 1 and 'aria-label="DSR"' in page and 'aria-label="AC"' in page
    assert (
        "Synthetic IDE B + &lt;Model-2&gt; — Python" in page and "this run — Python</text>" in page and "41.50" in page
    )
    ref.write_text(json.dumps([{**rows[0], "dsr": 180}]))
    assert main(["report", str(score_dir), "--html", str(tmp_path / "x.html"), "--reference", str(ref)]) == 2


def test_curve_series_are_distinct() -> None:
    from bridge.reports.charts import curve_svg

    pts = [{"moment": {"wall_seconds": t}, "pass_at_1": 1.0, "dsr": True, "ac": 1.0} for t in (1, 2)]
    svg = curve_svg(pts)
    assert svg.count("<polyline") == 3 and 'stroke-dasharray="8 4"' in svg and 'stroke-dasharray="2 3"' in svg
    assert "<rect x=" in svg and "<path d=" in svg and "<circle" in svg  # circle, square, triangle markers


def test_per_test_table_in_chromium(score_dir: Path, tmp_path: Path, chromium: str) -> None:  # noqa: F811
    page = write_html(score_dir, tmp_path / "score.html")
    text = page.read_text()
    assert '<table class="tests">' in text and "Static and dynamic API coverage disagree" in text
    shot = tmp_path / "table.png"
    run_chromium(chromium, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri())
    width, bpp, rows = decode_png(shot.read_bytes())
    red = sum(  # the failed/error outcome cells and the disagreement flag are drawn in #b42318
        1
        for row in rows[::2]
        for x in range(0, width * bpp, bpp * 2)
        if abs(row[x] - 0xB4) < 24 and row[x + 1] < 0x50 and row[x + 2] < 0x50
    )
    assert red > 200, f"no red outcome cells in the screenshot ({red} px)"
    if os.environ.get("RGBRIDGE_KEEP_SCREENSHOT"):  # a copy to look at: RGBRIDGE_KEEP_SCREENSHOT=/tmp/x.png
        shutil.copy(shot, os.environ["RGBRIDGE_KEEP_SCREENSHOT"])
    dom = run_chromium(chromium, tmp_path / "profile", "--dump-dom", page.as_uri()).stdout.decode()
    cells = dom.split('<table class="tests">', 2)
    assert len(cells) == 3  # one per profile
    strict_table = cells[2].split("</table>", 1)[0]
    assert FAILING in strict_table and "E assert 404 in [200, 204]" in strict_table and "call" in strict_table
    assert "0.04s" in strict_table and "[bold red]not markup[/]" in strict_table


def test_panel_shows_the_failures_after_scoring() -> None:
    from rich.console import Console

    from bridge.commands.panel import PanelInput, render_panel
    from bridge.sessions.models import ResultStatus, SessionStatus

    status = SessionStatus(
        session_id="s1",
        task_id="kv-ledger",
        state="scored",
        mode="human",
        workspace="/w",
        recording="/r/s1",
        clock_running=False,
        working_seconds=61,
        time_limit=0,
        files_changed=3,
        recorder_mode="inotify",
        recorder_degraded=None,
        submission=None,
        scoring="done",
        job_id="j1",
    )
    summary = summarize_result(flawed_result().model_dump(mode="json"))
    result = ResultStatus(session_id="s1", state="done", summary=summary)
    con = Console(record=True, width=200)
    con.print(render_panel(status, result, PanelInput(), port=8090, keys=True))
    text = con.export_text()
    assert "Scored. The result is saved in /r/s1." in text and "Pass@1 33/35" in text
    assert f"failed {FAILING} — E assert 404 in [200, 204]" in text and MARKUP in text
    assert "get_result" not in text
