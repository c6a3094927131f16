"""`rgbridge report OUT --reference results.json`: an agent run's row among the published rows, in
the terminal and in the HTML, and the HTML of a run saying whose row it is, attempt by attempt.

The reference files are synthetic, in the two shapes upstream's leaderboard `results.json` has
had (a list of rows; boards of rows such as `verified_no_docker`); the run folder is built by
hand with the report fields of an agent run (older folders without them must still render).
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from bridge.cli import main
from bridge.reports.html import render_html, write_html
from bridge.reports.leaderboard import leaderboard_lines
from bridge.reports.reference import load_reference
from bridge.scoring.result import ScoreResult
from bridge.scoring.run.reporting import RunWriter, build_entry
from tests.helpers import assert_no_active_content, decode_png, run_chromium

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "recordings" / "samples" / "kv-ledger-sample"
FIXTURES = Path(__file__).parent / "fixtures" / "leaderboard"
BOARDS = FIXTURES / "results_boards.json"  # {"verified": [], "full": [...], "verified_no_docker": [...]}
LIST = FIXTURES / "results.json"  # the older shape: a list of rows
EVIL = '<img src=x onerror="alert(1)">'


# ----------------------------------------------------------------------------- a run folder by hand


def _sample() -> ScoreResult:
    path = next((SAMPLE / "results").glob("submission-*/result.json"))
    return ScoreResult.model_validate_json(path.read_text())


def _recording(tmp: Path) -> tuple[Path, str]:
    """A copy of the sample recording with an agent trajectory, as `rgbridge run` keeps it."""
    rec = tmp / "recordings" / "run1" / "kv-ledger" / "a1" / "sess"
    shutil.copytree(SAMPLE, rec)
    meta = json.loads((rec / "session.json").read_text())
    started = datetime.fromisoformat(meta["created_at"].replace("Z", "+00:00"))
    steps = [
        {"step_id": 1, "source": "user", "message": "solve kv-ledger", "timestamp": started.isoformat()},
        {
            "step_id": 2,
            "source": "agent",
            "message": "",
            "timestamp": (started + timedelta(seconds=3)).isoformat(),
            "tool_calls": [{"tool_call_id": "c1", "function_name": "Write", "arguments": {"file_path": "app.py"}}],
        },
        {
            "step_id": 3,
            "source": "agent",
            "message": "submitting now",
            "timestamp": (started + timedelta(seconds=20)).isoformat(),
        },
    ]
    (rec / "agent").mkdir()
    trajectory = {
        "schema_version": "ATIF-v1.8",
        "session_id": meta["session_id"],
        "agent": {"name": "claude-code", "version": "2.0.31 (Claude Code)", "model_name": "claude-sonnet-4-5"},
        "steps": steps,
    }
    (rec / "agent" / "trajectory.json").write_text(json.dumps(trajectory))
    return rec, str(meta["session_id"])


def _run_block(rec: Path | None, sid: str, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": sid,
        "recording": str(rec) if rec else "",
        "ended": "exit",
        "exit_code": 0,
        "submitted_by": "agent",
        "wall_seconds": 61.25,
        "agent_seconds": 40.5,
        "scoring_seconds": 19.75,
        "overhead_seconds": 1.0,
        "tool_calls": 7,
        "steps": 3,
        **extra,
    }


def make_run(
    tmp: Path, *, sandbox: str = "bwrap", new_fields: bool = True, hostile_recording: bool = False
) -> tuple[Path, dict[str, Any]]:
    """A `rgbridge run` folder: kv-ledger solved (a1), then a rate-limited attempt (a2, agent_error),
    and a second task that scored zero (hostile texts)."""
    out = tmp / "run"
    writer = RunWriter(out, "2026-03-01_10-00-00")
    rec, sid = _recording(tmp)
    agent = {"name": "claude-code", "version": "2.0.31 (Claude Code)", "model": "claude-sonnet-4-5"}
    good = build_entry(_sample(), "compat")
    good.update(agent=agent, attempt=1, contaminated=False)
    extra: dict[str, Any] = {"prompt_tokens": 1200, "completion_tokens": 340, "cached_tokens": 800, "cost_usd": 0.1234}
    if new_fields:
        extra.update(
            tokens={"input": 1200, "output": 340, "cache_read": 800, "cache_write": 150},
            sandbox={"kind": sandbox, "version": "bubblewrap 0.8.0", "confined": sandbox != "none", "limits": {}},
        )
    if hostile_recording:  # a row naming a recording that is not its session's: no page, no link
        other = tmp / "elsewhere"
        shutil.copytree(SAMPLE, other)
        good["run"] = _run_block(other, "not-the-session", **extra)
    else:
        good["run"] = _run_block(rec, sid, **extra)
    writer.record(good, key="kv-ledger.a1")
    if new_fields:
        errored = {
            "repo_name": "kv-ledger",
            "lang": "python",
            "outcome": "agent_error",
            "agent_error": {"class": "rate_limit", "message": "429 Too Many Requests " + EVIL, "retries": 2},
            "agent": agent,
            "attempt": 2,
            "contaminated": False,
            "run": _run_block(None, "s2", ended="exit", exit_code=1, cost_usd=0.0021),
        }
        writer.record(errored, key="kv-ledger.a2")
    bad = _sample().model_copy(deep=True)
    bad.task_id = "evil-task"
    for prof in bad.profiles.values():
        prof.outcome = "deploy_failed"
        prof.dsr.success = False
        prof.dsr.message = EVIL
        prof.pass_at_1.passed, prof.pass_at_1.failed, prof.pass_at_1.score = 0, prof.pass_at_1.total, 0.0
    zero = build_entry(bad, "compat")
    zero.update(agent={**agent, "version": EVIL}, attempt=1, contaminated=False, run=_run_block(None, "s3", **extra))
    writer.record(zero, key="evil-task.a1")
    writer.record({**zero, "attempt": 2}, key="evil-task.a2")
    meta: dict[str, Any] = {
        "agent": agent,
        "attempts": 2,
        "time_limit_seconds": 900.0,
        "bridge_version": "0.4.0+gtest",
        "predictions_dir": str(out / "attempts"),
    }
    if new_fields:
        meta.update(
            config={
                "hash": "c0ffee00deadbeef1234",
                "cli_version": "2.0.31 (Claude Code)",
                "model": "claude-sonnet-4-5",
                "prompt": "upstream",
                "prompt_hash": "ab12cd34ef56ab78cd90",
                "time_limit_seconds": 900.0,
                "attempts": 2,
                "sandbox": sandbox,
                "bridge_version": "0.4.0+gtest",
            },
            sandbox=sandbox,
            unconfined=sandbox == "none",
            errored_attempts=["kv-ledger.a2"],
            cost_usd=0.2489,
            tokens={"input": 2400, "output": 680, "cache_read": 1600, "cache_write": 300},
        )
    path = writer.finalize(meta)
    return out, json.loads(path.read_text())


# ----------------------------------------------------------------------------- HTML read back


class _Page(HTMLParser):
    """Tables by class (rows of cell texts, with the row's class) and every link."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[tuple[str, list[str]]]] = {}
        self.links: list[str] = []
        self._table: str | None = None
        self._row: list[str] | None = None
        self._row_cls = ""
        self._cell: list[str] | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self._table = a.get("class") or ""
            self.tables.setdefault(self._table, [])
        elif tag == "tr":
            self._row, self._row_cls = [], a.get("class") or ""
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "a":
            self.links.append(a.get("href") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.tables[self._table].append((self._row_cls, self._row))
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(html: str) -> _Page:
    p = _Page()
    p.feed(html)
    return p


def meta_rows(page: _Page) -> dict[str, str]:
    """The 'Whose row' table: the `meta` rows after the page's own metadata table (later wins)."""
    out: dict[str, str] = {}
    for _, cells in page.tables["meta"]:
        if len(cells) == 2:
            out[cells[0]] = cells[1]
    return out


# ----------------------------------------------------------------------------- loading


def test_published_shapes_load() -> None:
    rows = load_reference(BOARDS)
    assert len(rows) == 8 and {r.board for r in rows} == {"full", "verified_no_docker"}
    full = [r for r in rows if r.board == "full"]
    assert all(r.dsr is None for r in full)  # the "full" board leaves DSR out
    nulls = [r for r in rows if r.model.startswith("Synthetic IDE D")]
    assert nulls[0].pass_at_1 is None and nulls[0].dsr == 0.0  # null = "N/A" on the published page
    assert nulls[0].model_extra and nulls[0].model_extra["org"] == "Example Org"  # extra keys kept
    only = load_reference(BOARDS, "verified_no_docker")
    assert len(only) == 6 and {r.board for r in only} == {"verified_no_docker"}
    assert len(load_reference(LIST)) == 3 and {r.board for r in load_reference(LIST)} == {""}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"verified_no_docker": [{"model": "x", "pass_at_1": 180, "ac": 1, "dsr": 1}]},
            "verified_no_docker[0]: pass_at_1",
        ),
        ({"verified": ["nope"]}, "verified[0] is not an object"),
        ({"title": "no boards"}, "not a leaderboard results.json"),
        ([{"category": "IDE", "pass_at_1": 1}], "row 0: model"),
    ],
)
def test_bad_reference_is_one_line(tmp_path: Path, data: Any, message: str) -> None:
    from bridge.errors import ScoringError

    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ScoringError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_reference(path)


def test_unknown_board_names_the_boards() -> None:
    from bridge.errors import ScoringError

    with pytest.raises(
        ScoringError, match="no board .verified_docker. \\(boards: verified, full, verified_no_docker\\)"
    ):
        load_reference(BOARDS, "verified_docker")


def test_run_rows_read_the_report_defensively() -> None:
    from bridge.reports.reference import run_rows

    strict_only = {
        "metadata": {"agent": "codex"},
        "summary": {"total_repos": 1},  # no compat rows: no per-language compat means
        "strict_summary": {
            "by_lang": {"python": {"avg_pass_at_1": 0.5, "avg_api_coverage": None, "deployment_success_rate": 1.0}}
        },
        "results": [{"lang": "python", "agent": {"model": "m"}}],
    }
    (row,) = run_rows(strict_only)
    assert (row.category, row.model, row.pass_at_1, row.ac, row.dsr) == (
        "this run (strict)",
        "codex + m",
        50.0,
        None,
        100.0,
    )
    hostile = {
        "summary": {"pass_at_1_by_lang": {"java": 7.0}, "ac_by_lang": {"java": "x"}, "dsr_by_lang": {"java": 0.25}},
        "results": [{"lang": "java"}, "not a row"],
    }
    (row,) = run_rows(hostile)
    assert (row.model, row.pass_at_1, row.ac, row.dsr) == ("this run", None, None, 25.0)


def test_ranked_on_the_languages_of_the_run() -> None:
    from bridge.reports.reference import LeaderboardRow, paper_rows

    def row(model: str, lang: str, p1: float) -> LeaderboardRow:
        return LeaderboardRow(model=model, category="IDE", language=lang, pass_at_1=p1, ac=1.0, dsr=1.0)

    ref = [row("X + m", "Python", 10.0), row("X + m", "Java", 40.0), row("Y + m", "Python", 20.0)]
    python_run = {"summary": {"pass_at_1_by_lang": {"python": 0.15}}, "results": [{"lang": "python"}]}
    # a Python-only run is compared on Python: Y (20) above the run (15) above X (10), whatever X's Java
    assert [(r.system, r.ours) for r in paper_rows(python_run, ref)] == [("Y", False), ("this run", True), ("X", False)]


# ----------------------------------------------------------------------------- the terminal


@pytest.mark.parametrize("ref", [BOARDS, LIST], ids=["boards", "list"])
def test_terminal_table_puts_the_run_among_the_reference(
    tmp_path: Path, ref: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    run, report = make_run(tmp_path)
    assert main(["report", str(run), "--reference", str(ref)]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Beside the reference rows") :]
    lines = [ln for ln in table.splitlines() if "Synthetic" in ln or "▶" in ln]
    ours = [i for i, ln in enumerate(lines) if "▶ this run" in ln]
    assert len(ours) == 1, table
    mine = lines[ours[0]]
    assert "claude-code 2.0.31 (Claude Code)" in mine and "claude-sonnet-4-5" in mine
    python = report["summary"]["pass_at_1_by_lang"]["python"]
    assert f"{100 * python:.2f}" in mine
    assert "<Model-2>" in table  # printed as text, never read as markup
    if ref == BOARDS:
        # among, not beside: reference lines above and below it, best Pass@1 first
        assert 0 < ours[0] < len(lines) - 1, table
        assert "Synthetic IDE B" in lines[0] and "62.50" in lines[0]
        assert "N/A" in table and "verified_no_docker" in table  # null metrics, the board column
    head = next(ln for ln in out.splitlines() if ln.startswith("claude-code"))
    assert "unconfined" not in head


def test_terminal_board_filter_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = make_run(tmp_path)
    assert main(["report", str(run), "--reference", str(BOARDS), "--reference-board", "full", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = data["beside_reference"]
    assert [r["ours"] for r in rows].count(True) == 1
    assert {r["board"] for r in rows if not r["ours"]} == {"full"}
    assert main(["report", str(run), "--reference-board", "full"]) == 2  # needs --reference


def test_bad_reference_fails_before_anything_is_written(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"verified": [{"model": "x", "pass_at_1": -1, "ac": 0, "dsr": 0}]}))
    out = tmp_path / "page" / "r.html"
    assert main(["report", str(run), "--html", str(out), "--reference", str(bad)]) == 2
    assert not out.parent.exists()


# ----------------------------------------------------------------------------- the HTML


def test_html_names_whose_row_and_every_attempt(tmp_path: Path) -> None:
    run, report = make_run(tmp_path)
    out = write_html(run, tmp_path / "html" / "report.html", reference=BOARDS)
    html = out.read_text()
    assert_no_active_content(html, attempt_links=True)
    page = parse(html)
    # the paper's table: the run's line among the reference lines
    paper = page.tables["paper"]
    body = [(cls, cells) for cls, cells in paper if cells and cells[0].isdigit()]
    ours = [i for i, (cls, _) in enumerate(body) if cls == "ours"]
    assert len(ours) == 1 and 0 < ours[0] < len(body) - 1
    mine = body[ours[0]][1]
    assert mine[1] == "this run" and mine[2] == "claude-code 2.0.31 (Claude Code)" and mine[3] == "claude-sonnet-4-5"
    python = report["summary"]["pass_at_1_by_lang"]["python"]
    assert f"{100 * python:.2f}" in mine
    assert "Synthetic IDE B" in body[0][1][2] and "<Model-2>" in body[0][1][3]  # escaped, shown as text
    assert "&lt;Model-2&gt;" in html
    # whose row
    who = meta_rows(page)
    assert who["agent"] == "claude-code"
    assert who["CLI version"] == "2.0.31 (Claude Code)"
    assert who["model"].startswith("claude-sonnet-4-5")
    assert who["prompt"].startswith("upstream") and "ab12cd34ef56ab78" in who["prompt"]
    assert who["time limit"] == "900 s" and who["attempts per task"] == "2"
    assert who["sandbox"].startswith("bwrap") and "unconfined" not in who["sandbox"]
    assert "Pass@2 compat" in who["Pass@k"] and "Pass@1 compat" in who["Pass@k"]
    assert who["cost"] == "$0.2489" and "cache write 300" in who["tokens"]
    assert who["attempts run"] == "4 (3 scored, 1 agent error(s), not in the means)"
    assert who["errored attempts"] == "kv-ledger.a2 (rate_limit)"
    assert who["configuration hash"] == "c0ffee00deadbeef"
    # every attempt: outcome or error class, times, tokens, cost, its recording page
    attempts = {cells[0]: cells for _, cells in page.tables["attempts"][1:]}
    a1, a2 = attempts["kv-ledger.a1"], attempts["kv-ledger.a2"]
    assert a1[1].startswith("scored") and a1[2] == "35/35 · 35/35"
    assert a1[4:7] == ["61.2s", "40.5s", "19.8s"] or a1[4:7] == ["61.3s", "40.5s", "19.8s"]
    assert a1[7:12] == ["1,200", "340", "800", "150", "$0.1234"] and a1[12] == "bwrap" and a1[13] == "recording"
    assert a2[1].startswith("agent_error: rate_limit after 2 retries") and "429 Too Many Requests" in a2[1]
    assert '<img src=x onerror="alert(1)">' not in html
    # the recording link: a relative page beside this one, holding the trajectory beside the file events
    (link,) = page.links
    assert link == "report_attempts/kv-ledger.a1.html"
    rec_page = (out.parent / link).read_text()
    assert_no_active_content(rec_page)
    assert rec_page.startswith("<!DOCTYPE html>") and "Session timeline" in rec_page
    assert "claude-code 2.0.31 (Claude Code), model claude-sonnet-4-5: 2 steps, 1 tool calls" in rec_page
    assert "calls Write" in rec_page and "says submitting now" in rec_page
    events = parse(rec_page).tables[""]
    kinds = {cells[2] for _, cells in events if len(cells) == 4}
    assert {"agent", "file"} <= kinds or "agent" in kinds  # agent steps among the recorded events


def test_unconfined_is_marked_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    run, report = make_run(tmp_path, sandbox="none")
    page_html = write_html(run, tmp_path / "r.html").read_text()
    assert "<span class='badge warn'>unconfined</span>" in page_html and "class='banner'" in page_html
    who = meta_rows(parse(page_html))
    assert who["sandbox"] == "none unconfined"
    head, *rest = leaderboard_lines(report)
    assert head.endswith("unconfined (no sandbox)")
    assert any(ln.startswith("  ERRORED attempts (1;") and "kv-ledger.a2 (rate_limit)" in ln for ln in rest)
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "unconfined (no sandbox)" in out and "agent_error: rate_limit" in out
    # a confined run says nothing of the kind
    run2, report2 = make_run(tmp_path / "b", sandbox="docker")
    assert "unconfined" not in leaderboard_lines(report2)[0]
    assert "badge warn'>unconfined" not in render_html(run2)


def test_errored_attempts_are_not_in_the_means(tmp_path: Path) -> None:
    _, report = make_run(tmp_path)
    lines = leaderboard_lines(report)
    python = next(ln for ln in lines if ln.startswith("  python:"))
    # kv-ledger a1 solved 35/35, evil-task a1 and a2 0: the mean of the three scored attempts,
    # the errored kv-ledger a2 left out (it would make it 0.2500 as a zero)
    assert "strict Pass@1 0.3333" in python and "compat Pass@1 0.3333" in python
    # Pass@2 over tasks with two scored attempts: evil-task only (kv-ledger has one)
    assert "compat Pass@2 0.0000" in python
    assert "(4 attempts, 2 per task" in lines[0]
    # an errored attempt the metadata lists without a row is listed too
    report["metadata"]["errored_attempts"] = ["kv-ledger.a2", "word-duel.a1"]
    (errored,) = [ln for ln in leaderboard_lines(report) if "ERRORED" in ln]
    assert errored.endswith(
        "(2; agent failures, not scored, not in the means): kv-ledger.a2 (rate_limit), word-duel.a1"
    )


def test_older_run_folder_still_renders(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path, new_fields=False)
    page = parse(write_html(run, tmp_path / "r.html", reference=LIST).read_text())
    who = meta_rows(page)
    assert who["agent"] == "claude-code" and who["CLI version"] == "2.0.31 (Claude Code)"
    assert who["prompt"] == "not recorded" and who["sandbox"] == "not recorded"
    assert who["time limit"] == "900 s"
    attempts = {cells[0]: cells for _, cells in page.tables["attempts"][1:]}
    # the older token fields: prompt / completion / cached, no cache write
    assert attempts["kv-ledger.a1"][7:12] == ["1,200", "340", "800", "–", "$0.1234"]
    assert any(cls == "ours" for cls, _ in page.tables["paper"])
    # and a report written before agent runs (evaluate): no whose-row section at all
    plain = tmp_path / "eval"
    writer = RunWriter(plain, "2026-01-01_00-00-00")
    writer.record(_sample())
    writer.finalize({})
    assert "Whose row" not in render_html(plain)


def test_a_row_cannot_point_its_link_elsewhere(tmp_path: Path) -> None:
    run, _ = make_run(tmp_path, hostile_recording=True)
    out = write_html(run, tmp_path / "r.html")
    page = parse(out.read_text())
    assert page.links == [] and not (tmp_path / "r_attempts").exists()
    assert str(tmp_path / "elsewhere") in out.read_text()  # shown as a path, not followed


def test_run_page_in_chromium(chromium: str, tmp_path: Path) -> None:
    run, _ = make_run(tmp_path, sandbox="none")
    page = write_html(run, tmp_path / "report.html", reference=BOARDS)
    shot = tmp_path / "run.png"
    proc = run_chromium(
        chromium, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri()
    )
    assert shot.is_file(), proc.stderr.decode(errors="replace")[-2000:]
    if os.environ.get("RGBRIDGE_KEEP_SCREENSHOT"):  # a copy to look at: RGBRIDGE_KEEP_SCREENSHOT=/tmp/x.png
        shutil.copy(shot, os.environ["RGBRIDGE_KEEP_SCREENSHOT"])
    width, bpp, rows = decode_png(shot.read_bytes())
    assert width == 1200 and len(rows) == 2000

    def count(rgb: tuple[int, int, int], tol: int = 10) -> int:
        return sum(
            1
            for row in rows[::2]
            for x in range(0, width * bpp, bpp * 2)
            if all(abs(row[x + i] - rgb[i]) <= tol for i in range(3))
        )

    # the unconfined banner's and the run's table line's pale red (#fff4f2, #fde8e6), their red
    # text and border (#b42318, #d92d20): drawn, not only present in the markup
    assert count((0xFD, 0xE8, 0xE6), 3) > 500, "no highlighted line / badge in the screenshot"
    assert count((0xFF, 0xF4, 0xF2), 3) > 500, "no unconfined banner in the screenshot"
    assert count((0xB4, 0x23, 0x18), 40) > 100
    dom = run_chromium(chromium, tmp_path / "profile", "--dump-dom", page.as_uri()).stdout.decode(
        "utf-8", errors="replace"
    )
    assert "Whose row" in dom and "Beside the reference rows" in dom and "unconfined" in dom
    assert "claude-code 2.0.31 (Claude Code)" in dom and "agent_error: rate_limit" in dom
    assert "report_attempts/kv-ledger.a1.html" in dom
    linked = run_chromium(
        chromium, tmp_path / "profile", "--dump-dom", (tmp_path / "report_attempts").iterdir().__next__().as_uri()
    )
    assert "says submitting now" in linked.stdout.decode("utf-8", errors="replace")


def test_the_report_marks_a_shared_network_lists_the_hosts_asked_and_counts_unscored_tasks(tmp_path: Path) -> None:
    from bridge.reports.run_sections import attempts_html, whose_row_html

    # issue 38: the network mode, the hosts asked for, and every planned task counted
    _, report = make_run(tmp_path)
    assert "shared network" not in leaderboard_lines(report)[0]  # a report from before issue 38: no claim
    report["metadata"]["network"] = "host"
    assert leaderboard_lines(report)[0].endswith("shared network (--network host)")
    assert "<span class='badge warn'>shared network</span>" in whose_row_html(report)
    # allow: the names let through, every host asked for (refused ones marked), per attempt too
    report["metadata"].update(network="allow", config={**report["metadata"]["config"], "allow_hosts": ["127.0.0.2"]})
    sandbox = report["results"][0]["run"]["sandbox"]
    sandbox["network"] = {
        "mode": "allow",
        "allowed_hosts": ["127.0.0.2"],
        "hosts_asked": [{"host": "127.0.0.2:8080", "allowed": True}, {"host": "127.0.0.3:80", "allowed": False}],
    }
    who = whose_row_html(report)
    assert "allowed: 127.0.0.2" in who and "127.0.0.2:8080" in who and "127.0.0.3:80 (refused)" in who
    assert "shared network" not in who and "bwrap · allow" in attempts_html(report)
    # a planned task with no score is a row, in no mean, counted in the line
    report["metadata"]["tasks"] = ["kv-ledger", "evil-task", "word-duel"]
    before = [ln for ln in leaderboard_lines(report) if ln.startswith("  python:")]
    report["results"].append(
        {"repo_name": "word-duel", "lang": "python", "outcome": "not_run", "attempt": 1, "unscored": "not started: cap"}
    )
    lines = leaderboard_lines(report)
    assert "5 attempts, 2 per task, 2 of 3 tasks scored;" in lines[0]
    assert [ln for ln in lines if ln.startswith("  python:")] == before
    assert "not started: cap" in attempts_html(report) and "1 without a score" in whose_row_html(report)
