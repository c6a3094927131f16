"""Aggregation (upstream + strict), the per-repo upstream dict, RunWriter, resume and the table."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rich.console import Console

from bridge.errors import ScoringError
from bridge.reports.table import render_table
from bridge.scoring.result import (
    GRADER_VERSION,
)
from bridge.scoring.run.reporting import (
    RunWriter,
    build_entry,
    infer_outcome,
    load_previous,
    profile_rows,
    summarize_strict,
    summarize_upstream,
)
from tests.helpers import make_score

# docs/upstream.md §4.2: the Codex-CLI run, one row per repo:
# (task, port, framework, dsr, passed, failed, errors, ac_impl, ac_total)
CODEX = [
    ("Blog", 8000, "fastapi", True, 0, 0, 0, 11, 11),
    ("Chatroom", 8083, "any", True, 4, 5, 0, 9, 9),
    ("Customization", 8082, "fastapi", True, 7, 34, 23, 10, 10),
    ("Data_Rank_Searcher", 8080, "any", True, 31, 2, 0, 4, 4),
    ("File_Relay", 8085, "any", True, 32, 14, 0, 10, 10),
    ("GameBackend", 8080, "any", True, 0, 0, 3, 10, 10),
    ("Multilingual", 5000, "flask", True, 33, 0, 0, 0, 0),
    ("SimpleFastPyAPI", 8000, "fastapi", True, 2, 0, 0, 2, 2),
    ("StructuredDataConvertor", 8000, "any", True, 0, 0, 4, 0, 0),
    ("TaskManagement", 8080, "any", True, 9, 35, 0, 6, 6),
    ("Tic-Tac-Toe", 8082, "any", True, 3, 4, 0, 6, 6),
    ("Timer4Tasker", 8080, "any", True, 0, 53, 0, 9, 9),
    ("UserManagement", 8081, "any", True, 0, 0, 0, 8, 8),
    ("UserManagement_2", 8080, "any", True, 0, 0, 0, 5, 5),
    ("WebPan", 8080, "any", True, 0, 0, 0, 0, 4),
    ("django-rest-framework-crud", 8000, "django", True, 2, 0, 0, 8, 8),
    ("eve", 5001, "eve", False, 0, 2, 0, 1, 1),
    ("flask", 5000, "flask", True, 7, 0, 0, 3, 3),
    ("mail_service", 8080, "any", True, 32, 23, 0, 3, 3),
    ("rock-paper-scissors-flask", 5000, "flask", True, 9, 0, 0, 0, 0),
    ("simple-rbac-service", 8080, "any", True, 0, 0, 0, 4, 4),
    ("synapse", 8080, "any", True, 0, 5, 0, 7, 7),
]


def codex_dicts() -> list[dict]:
    out = []
    for task, port, fw, ok, p, f, e, impl, tot in CODEX:
        total = p + f + e
        out.append(
            {
                "repo_name": task,
                "lang": "python",
                "port": port,
                "framework": fw,
                "exit_code": 0,
                "dsr": {
                    "success": ok,
                    "message": "Service started successfully" if ok else "Service failed to start within 15s",
                },
                "pass_at_1": {
                    "passed": p,
                    "failed": f,
                    "errors": e,
                    "skipped": 0,
                    "total": total,
                    "score": round(p / total, 4) if total else 0.0,
                },
                "api_coverage": {
                    "total_apis": tot,
                    "implemented_apis": impl,
                    "score": round(impl / tot, 4) if tot else 0.0,
                },
                "elapsed_seconds": 40.0,
            }
        )
    return out


# ----------------------------------------------------------------------------- upstream aggregation


def test_codex_run_reaggregates_to_published_summary() -> None:
    s = summarize_upstream(codex_dicts())
    assert s["avg_pass_at_1"] == 0.4943
    assert s["avg_api_coverage"] == 0.9474
    assert s["deployment_success_rate"] == 0.9545
    assert (s["total_repos"], s["python_repos"], s["java_repos"]) == (22, 22, 0)
    assert s["pass_at_1_by_lang"] == {"python": 0.4943, "java": 0.0}
    assert s["ac_by_lang"] == {"python": 0.9474, "java": 0.0}
    assert s["dsr_by_lang"] == {"python": 0.9545, "java": 0.0}


def test_codex_run_strict_view_counts_zero_totals() -> None:
    s = summarize_strict(codex_dicts())
    assert s["avg_pass_at_1"] == 0.382  # W10: the 5 zero-total repos count as 0
    assert s["counted_repos"] == 22 and s["infra_errors"] == 0
    assert s["outcomes"]["deploy_failed"] == 1 and s["outcomes"]["scored"] == 21
    assert s["deployment_success_rate"] == 0.9545


def test_summarize_upstream_empty() -> None:
    assert summarize_upstream([]) == {
        "total_repos": 0,
        "evaluated": 0,
        "avg_pass_at_1": 0.0,
        "avg_api_coverage": 0.0,
        "deployment_success_rate": 0.0,
    }


def test_summarize_upstream_missing_ac_key_and_java() -> None:
    rows = codex_dicts()[:2]
    del rows[0]["api_coverage"]
    rows.append(
        {
            "repo_name": "j",
            "lang": "java",
            "dsr": {"success": False},
            "pass_at_1": {"passed": 1, "total": 4, "score": 0.25},
        }
    )
    s = summarize_upstream(rows)
    assert s["ac_by_lang"] == {"python": 1.0, "java": 0.0}
    assert s["pass_at_1_by_lang"] == {"python": 0.4444, "java": 0.25}
    assert s["dsr_by_lang"] == {"python": 1.0, "java": 0.0}
    assert s["avg_pass_at_1"] == round((0.4444 + 0.25) / 2, 4)


def test_infer_outcome_from_upstream_fields() -> None:
    assert infer_outcome({"error": "boom", "exit_code": -99}) == "infra_error"
    assert infer_outcome({"build_error": "x", "exit_code": -3}) == "build_failed"
    assert infer_outcome({"exit_code": -1, "dsr": {"success": True}}) == "timeout"
    assert infer_outcome({"exit_code": 0, "dsr": {"success": False}}) == "deploy_failed"
    assert infer_outcome({"outcome": "scored", "error": None}) == "scored"


def test_strict_excludes_infra_errors() -> None:
    rows = [
        {
            "lang": "python",
            "outcome": "scored",
            "dsr": {"success": True},
            "pass_at_1": {"passed": 3, "total": 4},
            "dynamic_api_coverage": {"total_apis": 2, "score": 0.5},
        },
        {
            "lang": "python",
            "outcome": "build_failed",
            "dsr": {"success": False},
            "pass_at_1": {"passed": 0, "total": 0},
        },
        {"lang": "python", "outcome": "infra_error", "dsr": {"success": False}, "pass_at_1": {"passed": 0, "total": 0}},
    ]
    s = summarize_strict(rows)
    assert (s["total_repos"], s["counted_repos"], s["infra_errors"]) == (3, 2, 1)
    assert s["avg_pass_at_1"] == 0.375 and s["deployment_success_rate"] == 0.5
    assert s["avg_dynamic_api_coverage"] == 0.5 and s["avg_api_coverage"] is None
    assert s["by_lang"]["python"]["repos"] == 2 and s["by_lang"]["java"]["repos"] == 0


# ----------------------------------------------------------------------------- ScoreResult shapes


def test_to_upstream_dict_exact_shape() -> None:
    r = make_score("notes-api")
    d = r.to_upstream_dict("compat")
    assert list(d) == [
        "repo_name",
        "lang",
        "port",
        "framework",
        "exit_code",
        "dsr",
        "pass_at_1",
        "api_coverage",
        "elapsed_seconds",
    ]
    assert d["dsr"] == {"success": True, "message": "Service started successfully"}
    assert d["pass_at_1"] == {"passed": 2, "failed": 2, "errors": 0, "skipped": 0, "total": 4, "score": 0.5}
    assert d["api_coverage"] == {"total_apis": 2, "implemented_apis": 2, "score": 1.0}
    r.profiles["compat"].build_error = "Build failed (exit 1): x"
    r.profiles["compat"].api_coverage = None
    d = r.to_upstream_dict("compat")
    assert "api_coverage" not in d and d["build_error"].startswith("Build failed") and "error" not in d
    with pytest.raises(ScoringError):
        r.to_upstream_dict("nope")
    assert r.grader_version == GRADER_VERSION


def test_build_entry_has_both_profiles() -> None:
    e = build_entry(make_score("a"))
    assert e["repo_name"] == "a" and e["outcome"] == "scored" and e["pass_at_1"]["passed"] == 2
    assert set(e["rgbridge"]["profiles"]) == {"compat", "strict"}
    assert e["rgbridge"]["profiles"]["strict"]["pass_at_1"]["passed"] == 1
    json.dumps(e)  # serialisable
    strict_rows = profile_rows([e], "strict")
    assert strict_rows[0]["lang"] == "python" and infer_outcome(strict_rows[0]) == "scored"


# ----------------------------------------------------------------------------- RunWriter and resume


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_run_writer_writes_intermediate_and_report(tmp_path: Path) -> None:
    w = RunWriter(tmp_path, "2026-01-01_00-00-00")
    w.record(make_score("b"))
    w.record(make_score("a", strict_outcome="deploy_failed"))
    assert _files(w.intermediate_dir) == ["a.json", "b.json"]  # no temp files left behind
    report_path = w.finalize({"model_name": "m"})
    assert report_path.name == "report_2026-01-01_00-00-00.json"
    report = json.loads(report_path.read_text())
    assert set(report) >= {"metadata", "summary", "results", "strict_summary", "outcomes"}
    assert report["metadata"]["harness_version"] == "1.0.0" and report["metadata"]["model_name"] == "m"
    assert [r["repo_name"] for r in report["results"]] == ["a", "b"]
    assert report["summary"]["avg_pass_at_1"] == 0.5
    assert report["strict_summary"]["avg_pass_at_1"] == 0.25
    assert report["strict_summary"]["outcomes"]["deploy_failed"] == 1
    assert report["outcomes"]["a"] == {"compat": "scored", "strict": "deploy_failed"}


def test_run_writer_rejects_bad_names(tmp_path: Path) -> None:
    with pytest.raises(ScoringError):
        RunWriter(tmp_path, "../x")
    w = RunWriter(tmp_path, "r1")
    with pytest.raises(ScoringError):
        w.record({"repo_name": "../../etc/x"})


def test_chained_resumes_never_lose_results(tmp_path: Path) -> None:
    w1 = RunWriter(tmp_path, "run1")  # crashes after two repos: no finalize
    w1.record(make_score("A"))
    w1.record(make_score("B"))

    w2 = RunWriter(tmp_path, "run2")
    prev = load_previous(tmp_path, "run2")
    assert set(prev) == {"A", "B"}
    w2.adopt(prev)
    w2.record(make_score("C"))  # crashes again

    # a third run that (unlike upstream) still sees everything
    w3 = RunWriter(tmp_path, "run3")
    prev = load_previous(tmp_path, "run3")
    assert set(prev) == {"A", "B", "C"}
    w3.adopt(prev)
    w3.record(make_score("D"))
    report = json.loads(w3.finalize().read_text())
    assert [r["repo_name"] for r in report["results"]] == ["A", "B", "C", "D"]
    assert _files(w3.intermediate_dir) == ["A.json", "B.json", "C.json", "D.json"]

    # even without adopt() copies, every earlier folder is read
    for f in (tmp_path / "intermediate" / "run2").glob("[AB].json"):
        f.unlink()
    assert set(load_previous(tmp_path)) == {"A", "B", "C", "D"}


def test_resume_same_run_id_keeps_partial_results(tmp_path: Path) -> None:
    w = RunWriter(tmp_path, "same")
    w.record(make_score("A"))
    again = RunWriter(tmp_path, "same")
    again.adopt(load_previous(tmp_path, "same"))
    again.record(make_score("B"))
    report = json.loads(again.finalize().read_text())
    assert [r["repo_name"] for r in report["results"]] == ["A", "B"]


def test_resume_newest_wins_and_new_run_overrides(tmp_path: Path) -> None:
    old = RunWriter(tmp_path, "r-old")
    old.record(make_score("A", compat_passed=1))
    new = RunWriter(tmp_path, "r-new")
    new.record(make_score("A", compat_passed=3))
    os.utime(old.intermediate_dir / "A.json", (2_000_000_000, 2_000_000_000))  # old folder, newest file
    os.utime(new.intermediate_dir / "A.json", (1_000_000_000, 1_000_000_000))
    assert load_previous(tmp_path)["A"]["pass_at_1"]["passed"] == 1

    w = RunWriter(tmp_path, "r3")
    w.record(make_score("A", compat_passed=4))
    w.adopt(load_previous(tmp_path))  # must not override the fresh result
    assert w.results[0]["pass_at_1"]["passed"] == 4


def test_resume_reads_flat_files_filters_and_skips(tmp_path: Path) -> None:
    inter = tmp_path / "intermediate"
    inter.mkdir()
    rows = {r["repo_name"]: r for r in codex_dicts()}
    (inter / "Chatroom.json").write_text(json.dumps(rows["Chatroom"]))  # upstream's old flat layout
    (inter / "eve.json").write_text(json.dumps(rows["eve"]))
    (inter / "broken.json").write_text("{not json")
    (inter / "r1").mkdir()
    (inter / "r1" / "flask.json").write_text(json.dumps({**rows["flask"], "error": "docker died", "exit_code": -99}))
    assert set(load_previous(tmp_path)) == {"Chatroom", "eve"}  # infra errors are re-run
    assert set(load_previous(tmp_path, include_infra_errors=True)) == {"Chatroom", "eve", "flask"}
    assert set(load_previous(tmp_path, tasks=["eve", "WebPan"])) == {"eve"}
    assert load_previous(tmp_path / "nowhere") == {}


# ----------------------------------------------------------------------------- table


def test_render_table_side_by_side() -> None:
    entries = [build_entry(make_score("alpha")), build_entry(make_score("beta", strict_outcome="timeout"))]
    entries.append(codex_dicts()[16])  # plain upstream dict (eve)
    console = Console(record=True, width=220)
    render_table(entries, console)
    text = console.export_text()
    for needle in (
        "Repo",
        "Profile",
        "strict",
        "compat",
        "alpha",
        "2/4 (0.50)",
        "1/4 (0.25)",
        "1/2 (0.50)",
        "timeout",
        "eve",
        "FAIL",
        "0/2 (0.00)",
        "deploy_failed",
    ):
        assert needle in text, needle


def test_non_numeric_ac_in_earlier_report_is_invalid_not_a_crash(tmp_path: Path) -> None:
    """Issue 8: an upstream-schema intermediate file with `"score": "n/a"` crashed resume/summary."""
    w1 = RunWriter(tmp_path, "run1")
    w1.record(make_score("A"))
    w1.record(make_score("B"))
    f = tmp_path / "intermediate" / "run1" / "B.json"
    data = json.loads(f.read_text())
    (data.get("profiles", {}).get("compat") or data).setdefault("api_coverage", {})
    target = data.get("profiles", {}).get("compat") or data
    target["api_coverage"] = {"score": "n/a", "total_apis": 3, "implemented_apis": "x"}
    f.write_text(json.dumps(data))
    w2 = RunWriter(tmp_path, "run2")
    prev = load_previous(tmp_path, "run2")
    assert set(prev) == {"A"}  # B is invalid: it runs again
    w2.adopt(prev)
    w2.record(make_score("C"))
    report = json.loads(w2.finalize().read_text())
    assert [r["repo_name"] for r in report["results"]] == ["A", "C"]


def test_table_never_reads_repo_names_as_markup() -> None:
    """Issue 8: a repo named `repo[/x]` (e.g. from a run report being resumed) crashed the table."""
    import io

    from rich.console import Console

    from bridge.reports.table import render_table

    entry = {
        "repo_name": "repo[/x]",
        "lang": "python",
        "pass_at_1": {"score": 0.0, "passed": 0, "total": 2},
        "api_coverage": {"score": 0.0, "implemented_apis": 0, "total_apis": 2},
        "dsr": {"success": False},
    }
    buf = io.StringIO()
    render_table([entry], console=Console(file=buf, width=120))
    assert "repo[/x]" in buf.getvalue()
