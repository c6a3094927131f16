"""The self-contained HTML report: content, escaping, and a real render in headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.reports.html import render_html, write_html
from bridge.scoring.result import ScoreResult
from bridge.scoring.run.reporting import RunWriter
from tests.helpers import SAMPLE, assert_no_active_content, decode_png, run_chromium

EVIL = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


def _sample_result() -> ScoreResult:
    path = next((SAMPLE / "results").glob("submission-*/result.json"))
    return ScoreResult.model_validate_json(path.read_text())


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    writer = RunWriter(out, "2026-02-19_10-00-00")
    good = _sample_result()
    writer.record(good)
    # a second, failing repo whose texts are hostile
    bad = good.model_copy(deep=True)
    bad.task_id = "evil-task"
    for prof in bad.profiles.values():
        prof.outcome = "deploy_failed"
        prof.dsr.success = False
        prof.dsr.message = EVIL
        prof.pass_at_1.passed, prof.pass_at_1.failed, prof.pass_at_1.score = 0, prof.pass_at_1.total, 0.0
        for t in prof.tests:
            t.outcome, t.message = "failed", EVIL
        if prof.api_coverage:
            prof.api_coverage.endpoints[0].implemented = False
            prof.api_coverage.endpoints[0].path = EVIL
    writer.record(bad)
    writer.finalize({"predictions_dir": str(out / "preds"), "model_name": EVIL})
    return out


def test_recording_page_content() -> None:
    page = render_html(SAMPLE)
    assert_no_active_content(page)
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") >= 2
    assert "35/35 (1.0000)" in page
    assert "0.6286" in page  # a curve point
    assert "adding &lt;history&gt; &amp; counters" in page  # the note, escaped
    assert "Endpoints found (7)" in page and "Endpoints missing (0)" in page
    assert "score over time" in page and "session timeline" in page


def test_run_page_escapes_untrusted_text(run_dir: Path) -> None:
    page = render_html(run_dir)
    assert_no_active_content(page)
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page
    assert "Tests not passed (35)" in page and "Endpoints missing (1)" in page
    report = json.loads(next(run_dir.glob("report_*.json")).read_text())
    assert f"{report['summary']['avg_pass_at_1']:.4f}" in page
    assert f"{report['summary']['deployment_success_rate']:.4f}" in page  # 0.5000
    assert f"{report['strict_summary']['avg_pass_at_1']:.4f}" in page


def test_cli_writes_html(run_dir: Path, tmp_path: Path) -> None:
    from bridge.cli import main

    out = tmp_path / "r.html"
    assert main(["report", str(run_dir), "--html", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


# ----------------------------------------------------------------------------- headless Chromium


def test_renders_in_chromium(chromium: str, tmp_path: Path) -> None:
    page = write_html(SAMPLE, tmp_path / "report.html")
    shot = tmp_path / "out.png"
    proc = run_chromium(
        chromium, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri()
    )
    assert shot.is_file(), proc.stderr.decode(errors="replace")[-2000:]
    width, bpp, rows = decode_png(shot.read_bytes())
    assert width == 1200 and len(rows) == 1600
    colors: set[bytes] = set()
    non_white = 0
    for row in rows[::8]:
        for x in range(0, width * bpp, bpp * 4):
            px = row[x : x + 3]
            colors.add(px)
            non_white += px != b"\xff\xff\xff"
    assert len(colors) > 50, f"page looks blank ({len(colors)} colours)"
    assert non_white > 500

    dom = run_chromium(chromium, tmp_path / "profile", "--dump-dom", page.as_uri())
    text = dom.stdout.decode("utf-8", errors="replace")
    assert "35/35 (1.0000)" in text and "0.6286" in text and "kv-ledger" in text
    assert "Endpoints found (7)" in text
    assert "adding &lt;history&gt; &amp; counters" in text  # still text, never markup
