"""Strict grading: JUnit parsing, nodeid normalisation and the strict Pass@1 rules."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bridge.errors import ScoringError
from bridge.scoring.grading import MAX_JUNIT_BYTES, JUnitError, merge_results, strict_pass_at_1
from bridge.scoring.python.pytest_results import nodeid_from_junit, parse_collect_only, parse_junit_xml
from bridge.scoring.result import TestCaseResult

JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="2" tests="6" time="0.5">
<testcase classname="tests.test_x" name="test_ok" time="0.010" />
<testcase classname="tests.test_x.TestC" name="test_y[1]" time="0.020" />
<testcase classname="tests.test_x.TestC" name="test_y[2]" time="0.030">
  <failure message="assert 1 == 2">trace</failure></testcase>
<testcase classname="tests.test_x" name="test_err" time="0.0"><error message="fixture blew up" /></testcase>
<testcase classname="tests.test_x" name="test_skip" time="0.0"><skipped type="pytest.skip" message="down" /></testcase>
<testcase classname="tests.test_x" name="test_xfail" time="0.0"><skipped type="pytest.xfail" message="" /></testcase>
</testsuite></testsuites>"""


# ----------------------------------------------------------------------------- nodeids


@pytest.mark.parametrize(
    "classname,name,expected",
    [
        ("tests.test_x", "test_y", "tests/test_x.py::test_y"),
        ("tests.test_x.TestC", "test_y", "tests/test_x.py::TestC::test_y"),
        ("tests.test_x.TestC", "test_y[1]", "tests/test_x.py::TestC::test_y[1]"),
        ("tests.test_x.TestA.TestB", "test_y[a.b/c]", "tests/test_x.py::TestA::TestB::test_y[a.b/c]"),
        ("test_x", "test_y", "test_x.py::test_y"),
        ("tests.api.test_users.TestUsers", "test_list", "tests/api/test_users.py::TestUsers::test_list"),
    ],
)
def test_nodeid_from_junit_heuristic(classname: str, name: str, expected: str) -> None:
    assert nodeid_from_junit(classname, name) == expected


def test_nodeid_from_junit_known_resolves_ambiguity() -> None:
    # A capitalised module name would fool the heuristic; the collected set disambiguates.
    known = {"tests/Test_Caps.py::test_y"}
    assert nodeid_from_junit("tests.Test_Caps", "test_y") == "tests.py::Test_Caps::test_y"
    assert nodeid_from_junit("tests.Test_Caps", "test_y", known=known) == "tests/Test_Caps.py::test_y"


def test_nodeid_from_junit_with_file_attribute() -> None:
    assert nodeid_from_junit("tests.test_x.TestC", "test_y", file="tests/test_x.py") == "tests/test_x.py::TestC::test_y"
    assert nodeid_from_junit("tests.test_x", "test_y", file="./tests/test_x.py") == "tests/test_x.py::test_y"


def test_parse_collect_only() -> None:
    text = textwrap.dedent(
        """\
        tests/test_x.py::test_ok
        tests/test_x.py::TestC::test_y[1]
        tests/test_x.py::TestC::test_y[1]

        ERROR tests/test_bad.py::x - ImportError
        6 tests collected in 0.02s
        """
    )
    assert parse_collect_only(text) == ["tests/test_x.py::test_ok", "tests/test_x.py::TestC::test_y[1]"]


# ----------------------------------------------------------------------------- junit parsing


def test_parse_junit_outcomes() -> None:
    res = {r.nodeid: r for r in parse_junit_xml(JUNIT)}
    assert res["tests/test_x.py::test_ok"].outcome == "passed"
    assert res["tests/test_x.py::test_ok"].duration == pytest.approx(0.01)
    assert res["tests/test_x.py::TestC::test_y[1]"].outcome == "passed"
    assert res["tests/test_x.py::TestC::test_y[2]"].outcome == "failed"
    assert res["tests/test_x.py::TestC::test_y[2]"].message == "assert 1 == 2"
    assert res["tests/test_x.py::test_err"].outcome == "error"
    assert res["tests/test_x.py::test_skip"].outcome == "skipped"
    assert res["tests/test_x.py::test_xfail"].outcome == "skipped"


def test_parse_junit_single_testsuite_root_and_str() -> None:
    xml = '<testsuite><testcase classname="t" name="a"/></testsuite>'
    assert [r.nodeid for r in parse_junit_xml(xml)] == ["t.py::a"]


@pytest.mark.parametrize(
    "xml",
    [
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><testsuite>&a;</testsuite>',
        b'<?xml version="1.0"?><!doctype testsuite SYSTEM "file:///etc/passwd"><testsuite/>',
        b"<testsuite><testcase",
    ],
)
def test_parse_junit_rejects_unsafe_or_broken(xml: bytes) -> None:
    with pytest.raises(JUnitError):
        parse_junit_xml(xml)


def test_parse_junit_size_cap() -> None:
    with pytest.raises(ScoringError):
        parse_junit_xml(b" " * (MAX_JUNIT_BYTES + 1))


# ----------------------------------------------------------------------------- strict Pass@1


def _r(nodeid: str, outcome: str) -> TestCaseResult:
    return TestCaseResult(nodeid=nodeid, outcome=outcome)


def test_strict_pass_at_1_counts_unrun_skipped_and_ignores_extras() -> None:
    collected = ["t.py::a", "t.py::b", "t.py::c", "t.py::d", "t.py::e"]
    results = [
        _r("t.py::a", "passed"),
        _r("t.py::b", "skipped"),
        _r("t.py::c", "error"),
        _r("t.py::d", "failed"),
        # e never ran; extras not in the golden collection must not count
        _r("t.py::forged_1", "passed"),
        _r("t.py::forged_2", "passed"),
    ]
    p = strict_pass_at_1(collected, results)
    assert (p.passed, p.failed, p.errors, p.skipped, p.not_run, p.total) == (1, 1, 1, 1, 1, 5)
    assert p.score == 0.2


def test_strict_pass_at_1_duplicates_keep_worst() -> None:
    collected = ["t.py::a", "t.py::b"]
    results = [_r("t.py::a", "passed"), _r("t.py::a", "error"), _r("t.py::b", "passed"), _r("./t.py::b", "passed")]
    p = strict_pass_at_1(collected, results)
    assert (p.passed, p.errors, p.total) == (1, 1, 2)


def test_strict_pass_at_1_empty_collection_is_zero() -> None:
    p = strict_pass_at_1([], [_r("t.py::a", "passed")])
    assert p.total == 0 and p.score == 0.0


def test_merge_results_order_and_not_run() -> None:
    merged = merge_results(["t.py::b", "t.py::a"], [_r("t.py::a", "passed")])
    assert [(r.nodeid, r.outcome) for r in merged] == [("t.py::b", "not_run"), ("t.py::a", "passed")]


def test_all_passed_is_one() -> None:
    collected = [f"t.py::t{i}" for i in range(3)]
    assert strict_pass_at_1(collected, [_r(n, "passed") for n in collected]).score == 1.0


# ----------------------------------------------------------------------------- real pytest round trip


def test_junit_nodeids_equal_collect_only_nodeids(tmp_path: Path) -> None:
    """Run real pytest: every junit testcase maps onto a `--collect-only -q` nodeid."""
    suite = tmp_path / "suite"
    (suite / "tests" / "api").mkdir(parents=True)
    (suite / "tests" / "test_mod.py").write_text(
        textwrap.dedent(
            """\
        import pytest
        def test_plain(): pass
        @pytest.mark.parametrize("v", [1, "a.b", "x/y"])
        def test_param(v): assert v != 1
        class TestC:
            def test_m(self): pass
            class TestInner:
                def test_n(self): pytest.skip("nope")
        """
        )
    )
    (suite / "tests" / "api" / "test_deep.py").write_text("def test_deep():\n    raise RuntimeError('boom')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests"]
    collect = subprocess.run(
        base + ["--collect-only", "-q"], cwd=suite, env=env, capture_output=True, text=True, timeout=120
    )
    collected = parse_collect_only(collect.stdout)
    assert len(collected) == 7, collect.stdout
    junit = tmp_path / "junit.xml"
    subprocess.run(
        base + [f"--junitxml={junit}", "-q"], cwd=suite, env=env, capture_output=True, text=True, timeout=120
    )
    results = parse_junit_xml(junit.read_bytes(), known_nodeids=collected)
    assert sorted(r.nodeid for r in results) == sorted(collected)
    # the heuristic alone (no known set) agrees too for conventionally named tests
    assert sorted(r.nodeid for r in parse_junit_xml(junit.read_bytes())) == sorted(collected)
    p = strict_pass_at_1(collected, results)
    # plain, param[a.b], param[x/y], TestC::test_m pass; param[1] and test_deep fail; inner skipped
    assert (p.passed, p.failed, p.skipped, p.total) == (4, 2, 1, 7)
