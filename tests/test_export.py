"""Export to the upstream IDE-output layout and leaderboard rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bridge.errors import BridgeError
from bridge.fs.hashing import tree_hash
from bridge.recording.replay import replay
from bridge.reports.export import config_name, export_recordings, export_run, ide_display, leaderboard_rows
from bridge.reports.runreport import recording_report
from bridge.scoring.result import ScoreResult
from bridge.scoring.run.reporting import RunWriter

SAMPLE = Path(__file__).resolve().parent.parent / "recordings" / "samples" / "kv-ledger-sample"
ROW_KEYS = ["model", "category", "language", "pass_at_1", "ac", "dsr", "org", "date", "link", "org_img"]


def _result() -> ScoreResult:
    return ScoreResult.model_validate_json(next((SAMPLE / "results").glob("submission-*/result.json")).read_text())


@pytest.fixture()
def run(tmp_path: Path) -> tuple[Path, Path]:
    preds = tmp_path / "preds"
    replay(SAMPLE, "submission", preds / "kv-ledger")
    (preds / "kv-ledger" / "__pycache__").mkdir()
    (preds / "kv-ledger" / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"junk")
    writer = RunWriter(tmp_path / "out", "2026-02-19_10-00-00")
    good = _result()
    writer.record(good)
    half = good.model_copy(deep=True)  # a second Python repo that deployed but passed half
    half.task_id = "Other_Task"
    for prof in half.profiles.values():
        prof.pass_at_1.passed, prof.pass_at_1.score = 17, round(17 / 35, 4)
        prof.dsr.success = False
    writer.record(half)
    writer.finalize({"predictions_dir": str(preds), "timestamp": "2026-02-19T10:00:00"})
    return tmp_path / "out", preds


def test_config_name_rules() -> None:
    assert (
        config_name("0219", "cursor", "claude-4.5_thinking", "python")
        == "repo_readme_0219_cursor_claude-4.5_thinking_Python"
    )
    assert config_name("1216", "antigravity", "gemini3pro", "java").endswith("_Java")
    for ide, model in (("my_ide", "m"), ("cursor", "a/b"), ("", "m"), ("cursor", "x_python"), ("../x", "m")):
        with pytest.raises(BridgeError):
            config_name("0219", ide, model, "python")
    assert ide_display("vscode") == "Copilot" and ide_display("cursor") == "Cursor"


def test_leaderboard_rows_from_run(run: tuple[Path, Path]) -> None:
    out, _ = run
    report = json.loads(next(out.glob("report_*.json")).read_text())
    rows = leaderboard_rows(report, ide="cursor", model="Claude Sonnet 4.5")
    assert len(rows) == 1
    row = rows[0]
    assert list(row) == ROW_KEYS
    assert row["model"] == "Cursor + Claude Sonnet 4.5" and row["category"] == "IDE" and row["language"] == "Python"
    # compat summary: mean of 1.0 and 0.4857 Pass@1, both AC 1.0, DSR 1 of 2
    assert row["pass_at_1"] == round(100 * report["summary"]["pass_at_1_by_lang"]["python"], 2) == 74.29
    assert row["ac"] == 100.0 and row["dsr"] == 50.0 and row["date"] == "2026-02-19"
    strict = leaderboard_rows(report, ide="cursor", model="m", aggregation="strict")[0]
    assert strict["pass_at_1"] == 74.29 and strict["dsr"] == 50.0


def test_leaderboard_row_cli_for_recording(capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli import main

    assert (
        main(
            [
                "report",
                str(SAMPLE),
                "--leaderboard-row",
                "--ide",
                "vscode",
                "--model",
                "GPT-5 mini",
                "--link",
                "https://example.invalid/run",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert rows == leaderboard_rows(
        recording_report(SAMPLE), ide="vscode", model="GPT-5 mini", link="https://example.invalid/run"
    )
    assert rows[0]["model"] == "Copilot + GPT-5 mini" and rows[0]["pass_at_1"] == 100.0 and rows[0]["org"] == "Copilot"


def test_export_run_layout(run: tuple[Path, Path], tmp_path: Path) -> None:
    out, preds = run
    res = export_run(out, tmp_path / "ide", ide="cursor", model="claude-4.5")
    folder = tmp_path / "ide" / "repo_readme_0219_cursor_claude-4.5_Python"
    assert res.folders == {folder.name: ["kv-ledger"]}
    assert res.skipped == ["Other_Task"]  # no predictions folder for it
    task = folder / "kv-ledger"
    assert (task / "app.py").read_bytes() == (preds / "kv-ledger" / "app.py").read_bytes()
    assert not (task / "__pycache__").exists()
    assert (task / "start.sh").stat().st_mode & 0o100
    with pytest.raises(BridgeError, match="already exists"):
        export_run(out, tmp_path / "ide", ide="cursor", model="claude-4.5")


def test_export_recordings(tmp_path: Path) -> None:
    recs = tmp_path / "recs"
    shutil.copytree(SAMPLE, recs / SAMPLE.name)
    meta = json.loads((SAMPLE / "session.json").read_text())
    res = export_recordings(recs, tmp_path / "ide", ide="antigravity", model="gemini3pro")
    mmdd = meta["submission"]["at"][5:7] + meta["submission"]["at"][8:10]
    folder = tmp_path / "ide" / f"repo_readme_{mmdd}_antigravity_gemini3pro_Python"
    assert res.folders == {folder.name: ["kv-ledger"]}
    assert tree_hash(folder / "kv-ledger") == meta["submission"]["tree_hash"]


def test_export_cli(run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bridge.cli import main

    out, _ = run
    assert (
        main(
            [
                "export",
                str(out),
                "--layout",
                "repogenesis-ide",
                "--ide",
                "cursor",
                "--model",
                "m1",
                "-o",
                str(tmp_path / "x"),
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert list(data["folders"]) == ["repo_readme_0219_cursor_m1_Python"]
    assert main(["export", "--ide", "cursor", "--model", "m1", "-o", str(tmp_path / "y")]) == 2
