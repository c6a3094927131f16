"""The self-contained HTML report: content, escaping, and a real render in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bridge.reports.html import render_html, write_html
from bridge.scoring.result import ScoreResult
from bridge.scoring.run.reporting import RunWriter

SAMPLE = Path(__file__).resolve().parent.parent / "recordings" / "samples" / "kv-ledger-sample"
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


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


#: the only links a page may hold: an agent run's attempt pages written beside it (bridge/reports/html.py)
ATTEMPT_LINK = re.compile(r"^[A-Za-z0-9_.%\-]+_attempts/[A-Za-z0-9_.%\-]+\.html$")


def _no_active_content(page: str, *, attempt_links: bool = False) -> None:
    """No scripts, no event handlers, nothing loaded from elsewhere (checked on parsed tags); with
    `attempt_links`, links to the attempt pages beside it, nothing else."""
    parser = _Tags()
    parser.feed(page)
    names = {t for t, _ in parser.tags}
    banned = {"script", "img", "iframe", "object", "embed", "link", "form", "input"}
    assert not names & (banned if attempt_links else banned | {"a"}), names
    for tag, attrs in parser.tags:
        for key, value in attrs:
            assert not key.startswith("on"), (tag, key)
            if attempt_links and tag == "a" and key == "href":
                assert value and ATTEMPT_LINK.match(value), value
                continue
            assert key not in ("src", "href", "xlink:href", "action"), (tag, key, value)
    assert "@import" not in page and "url(" not in page


def test_recording_page_content() -> None:
    page = render_html(SAMPLE)
    _no_active_content(page)
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") >= 2
    assert "35/35 (1.0000)" in page
    assert "0.6286" in page  # a curve point
    assert "adding &lt;history&gt; &amp; counters" in page  # the note, escaped
    assert "Endpoints found (7)" in page and "Endpoints missing (0)" in page
    assert "score over time" in page and "session timeline" in page


def test_run_page_escapes_untrusted_text(run_dir: Path) -> None:
    page = render_html(run_dir)
    _no_active_content(page)
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


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    path = _chromium()
    if path is None:
        if os.environ.get("RGBRIDGE_REQUIRE_CHROMIUM", "") not in ("", "0", "false", "no"):
            pytest.fail("chromium required (RGBRIDGE_REQUIRE_CHROMIUM=1) but not installed")
        pytest.skip("chromium not installed (apt-get install -y chromium); set RGBRIDGE_REQUIRE_CHROMIUM=1 to fail")
    return path


def _run(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Tiny PNG decoder (8-bit RGB/RGBA, non-interlaced): width, height, unfiltered rows."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = bpp = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    i = 0
    for _ in range(height):
        ftype, line = raw[i], bytearray(raw[i + 1 : i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 0xFF
            elif ftype == 2:
                line[x] = (line[x] + b) & 0xFF
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def test_renders_in_chromium(chromium: str, tmp_path: Path) -> None:
    page = write_html(SAMPLE, tmp_path / "report.html")
    shot = tmp_path / "out.png"
    proc = _run(chromium, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri())
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

    dom = _run(chromium, tmp_path / "profile", "--dump-dom", page.as_uri())
    text = dom.stdout.decode("utf-8", errors="replace")
    assert "35/35 (1.0000)" in text and "0.6286" in text and "kv-ledger" in text
    assert "Endpoints found (7)" in text
    assert "adding &lt;history&gt; &amp; counters" in text  # still text, never markup
