"""Upstream parsing rules (quirks included) and the compat entrypoint run for real on the host."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bridge.scoring import upstream as up
from bridge.scoring.upstream import (
    extract_section,
    grade_upstream_log,
    parse_dsr,
    parse_pytest_summary,
    parse_surefire_summary,
    parse_test_exit_code,
)

ENTRYPOINT = Path(up.__file__).with_name("assets") / "compat_entrypoint.sh"


def _log(dsr: str = "DSR_RESULT=true\nDSR_MESSAGE=Service started successfully", test: str = "") -> str:
    return f"{up.DSR_START}\n{dsr}\n{up.DSR_END}\n{up.TEST_START}\n{test}\n{up.TEST_END}\n"


# ----------------------------------------------------------------------------- sections


def test_extract_section_first_indices_and_strip() -> None:
    log = "a START  x \n END b START y END"
    assert extract_section(log, "START", "END") == "x"


def test_extract_section_missing_or_inverted_is_empty() -> None:
    assert extract_section("no markers", "S", "E") == ""
    assert extract_section("S only", "S", "E") == ""
    assert extract_section("E then S", "S", "E") == ""


# ----------------------------------------------------------------------------- DSR


def test_dsr_no_markers() -> None:
    d = parse_dsr("whatever\n")
    assert d.success is False and d.message == "No DSR markers found in container output"


@pytest.mark.parametrize(
    "value,expected",
    [("true", True), ("TRUE", True), ("1", True), ("Yes", True), ("false", False), ("0", False), ("", False)],
)
def test_dsr_result_values(value: str, expected: bool) -> None:
    d = parse_dsr(_log(dsr=f"DSR_RESULT={value}\nDSR_MESSAGE=hi there"))
    assert d.success is expected and d.message == "hi there"


def test_dsr_message_defaults_to_unknown_and_last_line_wins() -> None:
    d = parse_dsr(_log(dsr="Launching\n  DSR_RESULT=false\nDSR_RESULT=true"))
    assert d.success is True and d.message == "Unknown"


# ----------------------------------------------------------------------------- pytest parser


def test_pytest_summary_basic() -> None:
    p = parse_pytest_summary("=== 5 passed, 2 failed, 1 error in 3.21s ===")
    assert (p.passed, p.failed, p.errors, p.skipped, p.total, p.score) == (5, 2, 1, 0, 8, 0.625)


def test_pytest_summary_empty_and_timeout() -> None:
    for text in ("", "TIMEOUT", "  TIMEOUT \n"):
        p = parse_pytest_summary(text)
        assert p.total == 0 and p.score == 0.0


def test_pytest_summary_last_line_wins_per_count_with_stray_text() -> None:
    # W9: a later log line ("got 500 errors") overrides the real summary's errors count,
    # while passed/failed keep the summary's values.
    text = "==== 3 passed, 1 failed in 0.5s ====\nservice: got 500 errors from upstream\n"
    p = parse_pytest_summary(text)
    assert (p.passed, p.failed, p.errors, p.total) == (3, 1, 500, 504)
    assert p.score == round(3 / 504, 4)


def test_pytest_summary_error_matches_errors_and_skips_ignored() -> None:
    p = parse_pytest_summary("==== 2 passed, 4 skipped, 3 errors in 1s ====")
    assert (p.passed, p.errors, p.skipped, p.total) == (2, 3, 0, 5)


def test_pytest_summary_no_tests_ran() -> None:
    p = parse_pytest_summary("============ no tests ran in 0.01s ============")
    assert p.total == 0 and p.score == 0.0


def test_pytest_summary_independent_counts_across_lines() -> None:
    # each count comes from the last line that has it, even if different lines
    text = "tests/test_a.py::t PASSED\n1 failed\n7 passed, 2 failed in 1s\n9 passed\n"
    p = parse_pytest_summary(text)
    assert (p.passed, p.failed, p.errors) == (9, 2, 0)


def test_pytest_summary_rounding() -> None:
    p = parse_pytest_summary("1 passed, 2 failed")
    assert p.score == 0.3333


# ----------------------------------------------------------------------------- surefire


def test_surefire_sums_every_line_w11() -> None:
    text = textwrap.dedent(
        """
        [INFO] Tests run: 10, Failures: 2, Errors: 1, Skipped: 1, Time elapsed: 0.3 s - in tests.ApiTest
        [INFO] Tests run: 5, Failures: 0, Errors: 0, Skipped: 0, Time elapsed: 0.1 s - in tests.OtherTest
        [INFO] Results:
        [ERROR] Tests run: 15, Failures: 2, Errors: 1, Skipped: 1
        """
    )
    p = parse_surefire_summary(text)
    assert (p.total, p.failed, p.errors, p.skipped) == (30, 4, 2, 2)
    assert p.passed == 30 - 4 - 2 - 2 and p.score == round(22 / 30, 4)


def test_surefire_passed_never_negative() -> None:
    p = parse_surefire_summary("Tests run: 1, Failures: 3, Errors: 0, Skipped: 0")
    assert p.passed == 0 and p.total == 1 and p.score == 0.0


# ----------------------------------------------------------------------------- grade_upstream_log


def test_grade_uses_test_section_only() -> None:
    log = "9 passed (noise before)\n" + _log(test="2 passed, 1 failed in 1s") + "99 failed after\n"
    dsr, p = grade_upstream_log(log, "python")
    assert dsr.success and (p.passed, p.failed, p.total) == (2, 1, 3)


def test_grade_missing_test_markers_parses_whole_log() -> None:
    log = f"{up.DSR_START}\nDSR_RESULT=false\n{up.DSR_END}\n4 passed, 1 failed in 2s\n"
    dsr, p = grade_upstream_log(log, "python")
    assert dsr.success is False and (p.passed, p.failed, p.total) == (4, 1, 5)


def test_grade_java_and_unknown_lang() -> None:
    log = _log(test="Tests run: 4, Failures: 1, Errors: 0, Skipped: 0")
    assert grade_upstream_log(log, "java")[1].passed == 3
    assert grade_upstream_log(log, "cobol")[1].total == 0


def test_parse_test_exit_code() -> None:
    assert parse_test_exit_code(_log(test="TEST_EXIT_CODE=0")) == 0
    assert parse_test_exit_code(_log(test="nothing")) is None


def test_combine_container_log() -> None:
    assert up.combine_container_log("out", "err") == "out\nerr"


def test_entrypoint_data_matches_script() -> None:
    script = ENTRYPOINT.read_text()
    for cand in up.START_SCRIPT_CANDIDATES:
        assert cand in script
    assert "find . -maxdepth 3 -name start.sh -type f" in script
    assert "for path in " + " ".join(up.HEALTH_PATHS) + ";" in script
    assert "for module in " + " ".join(up.PYTHON_UVICORN_MODULES) + ";" in script
    for fname, _cmd in up.PYTHON_FALLBACKS:
        assert f"-f {fname} ]" in script
    for marker in (up.DSR_START, up.DSR_END, up.TEST_START, up.TEST_END):
        assert f'echo "{marker}"' in script
    assert "LANG=" not in script.replace("RG_LANG=", "").replace("REPO_LANG", "")  # W6: LANG untouched


# ----------------------------------------------------------------------------- the entrypoint, for real

HAS_JSON_REPORT = importlib.util.find_spec("pytest_jsonreport") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))


def _run_entrypoint(
    repo: Path, tmp: Path, port: int, startup: int = 10, test_timeout: int = 60
) -> tuple[str, str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # The script runs `python -m pytest` as the container would: here that must be the interpreter
    # that has the test tools (the checkout's .venv), not whichever `python` is first on PATH.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)])
    env.update(
        REPO_LANG="python",
        SERVICE_PORT=str(port),
        STARTUP_TIMEOUT=str(startup),
        TEST_TIMEOUT=str(test_timeout),
        REPO_DIR=str(repo),
        RESULTS_DIR=str(tmp / "results"),
        JSON_REPORT_FILE=str(tmp / "pytest_report.json"),
    )
    proc = subprocess.Popen(
        ["bash", str(ENTRYPOINT)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        try:  # our own process group only: anything the script left behind
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return out, err, proc.returncode


@pytest.mark.skipif(not HAS_JSON_REPORT, reason="pytest-json-report not installed (pip install pytest-json-report)")
def test_entrypoint_start_sh_service_and_tests(tmp_path: Path) -> None:
    port = _free_port()
    repo = tmp_path / "repo"
    _write(
        repo,
        "start.sh",
        """\
        #!/bin/bash
        (sleep 1.5; echo "service-stdout-marker") &
        exec python3 -m http.server "$SERVICE_PORT" --bind 127.0.0.1
        """,
    )
    _write(
        repo,
        "tests/test_svc.py",
        """\
        import os, time, urllib.request
        URL = "http://127.0.0.1:%s/" % os.environ["SERVICE_PORT"]
        def test_root():
            assert urllib.request.urlopen(URL).status == 200
        def test_slow_enough_for_service_output():
            time.sleep(2.5)
        def test_fails():
            assert False, "expected failure"
        """,
    )
    out, err, rc = _run_entrypoint(repo, tmp_path, port)
    log = up.combine_container_log(out, err)
    dsr, p = grade_upstream_log(log, "python")
    assert dsr.success is True and dsr.message == "Service started successfully", out
    assert (p.passed, p.failed, p.errors, p.total, p.score) == (2, 1, 0, 3, 0.6667), out
    assert rc == 0 and parse_test_exit_code(log) == 0  # W5 reproduced
    assert (tmp_path / "results" / "compat_exit_code").read_text().strip() == "1"  # the real one
    assert (tmp_path / "pytest_report.json").is_file()
    # the backgrounded service's stdout lands inside the TEST section, as upstream
    assert "service-stdout-marker" in extract_section(log, up.TEST_START, up.TEST_END)
    assert out.index(up.TEST_END) < out.index("Evaluation complete")


def test_entrypoint_no_entry_point(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "deep" / "a" / "b").mkdir(parents=True)
    (repo / "deep" / "a" / "b" / "start.sh").write_text("exit 0\n")  # depth 4: not found
    out, err, _ = _run_entrypoint(repo, tmp_path, _free_port(), startup=2, test_timeout=20)
    dsr = parse_dsr(out)
    assert dsr.success is False and dsr.message == "No service entry point found"
    assert up.TEST_START in out and up.TEST_END in out  # tests run whatever DSR said


def test_entrypoint_service_exits_early(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _write(repo, "start.sh", "echo starting; exit 3\n")
    out, _, _ = _run_entrypoint(repo, tmp_path, _free_port(), startup=3, test_timeout=20)
    dsr = parse_dsr(out)
    assert dsr.success is False and dsr.message == "Service failed to start within 3s"


def test_entrypoint_alive_without_port_counts_as_started_and_is_cleaned_up(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    pidfile = tmp_path / "child.pid"
    _write(repo, "start.sh", f"sleep 60 & echo $! > {pidfile}; wait\n")
    out, _, _ = _run_entrypoint(repo, tmp_path, _free_port(), startup=2, test_timeout=20)
    dsr = parse_dsr(out)
    assert dsr.success is True and dsr.message == "Service started successfully"  # W7 quirk
    child = int(pidfile.read_text())
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def test_entrypoint_discovery_order(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    seen = tmp_path / "seen"
    for rel in ("scripts/start.sh", "bin/start.sh", "x/y/start.sh"):
        _write(repo, rel, f"echo {rel} >> {seen}; exit 1\n")
    _run_entrypoint(repo, tmp_path, _free_port(), startup=1, test_timeout=20)
    assert seen.read_text().split() == ["scripts/start.sh"]
    # cwd is the repo root, not the script's directory (upstream Docker behaviour)
    _write(repo, "scripts/start.sh", f"pwd > {seen}; exit 1\n")
    _run_entrypoint(repo, tmp_path, _free_port(), startup=1, test_timeout=20)
    assert seen.read_text().strip() == str(repo)


def test_entrypoint_find_fallback_depth_three(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    seen = tmp_path / "seen"
    _write(repo, "x/y/start.sh", f"echo found >> {seen}; exit 1\n")
    _run_entrypoint(repo, tmp_path, _free_port(), startup=1, test_timeout=20)
    assert seen.read_text().split() == ["found"]


def test_entrypoint_python_fallback_app_py(tmp_path: Path) -> None:
    port = _free_port()
    repo = tmp_path / "repo"
    _write(
        repo,
        "app.py",
        """\
        import http.server, os
        http.server.HTTPServer(("127.0.0.1", int(os.environ["SERVICE_PORT"])),
                               http.server.SimpleHTTPRequestHandler).serve_forever()
        """,
    )
    _write(repo, "main.py", "raise SystemExit(5)\n")  # app.py comes first
    out, _, _ = _run_entrypoint(repo, tmp_path, port, startup=10, test_timeout=20)
    assert "Launching service: python app.py" in out
    assert parse_dsr(out).success is True


def test_log_digest_grades_like_the_full_log() -> None:
    """The bounded digest compat grades on must give upstream's numbers for any log."""
    import random

    from bridge.scoring.upstream import LogDigest, grade_upstream_log

    rng = random.Random(7)
    pieces = [
        ">>>>> DSR_START",
        "DSR_RESULT=true",
        "DSR_MESSAGE=ok",
        ">>>>> DSR_END",
        ">>>>> TEST_START",
        ">>>>> TEST_END",
        "3 passed",
        "2 failed, 1 error",
        "got 500 errors",
        "hello",
        "",
        "TIMEOUT",
        "12 passed in 3s",
        "  ",
        "TEST_EXIT_CODE=0",
        "x >>>>> TEST_START y",
        " DSR_RESULT=yes",
    ]
    for _ in range(5000):
        log = "\n".join(rng.choice(pieces) for _ in range(rng.randint(0, 14))) + rng.choice(["", "\n"])
        digest = LogDigest()
        pos = 0
        while pos < len(log):
            step = rng.randint(1, 40)
            digest.feed(log[pos : pos + step].encode())
            pos += step
        assert grade_upstream_log(digest.text(), "python") == grade_upstream_log(log, "python"), log
    flood = LogDigest()
    for _ in range(20000):
        flood.feed(b"noise line that does not matter\n" * 50)
    assert len(flood.text()) < 1000
