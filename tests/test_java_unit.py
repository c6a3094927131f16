"""Java scoring pieces without Docker: golden method count, Surefire reports, pom rewrites,
the compat log digest, missing-artifact names."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.scoring import upstream
from bridge.scoring.java.compat import MavenLogDigest
from bridge.scoring.java.golden import golden_items, scan_source
from bridge.scoring.java.layers import missing_artifacts, stub_kind
from bridge.scoring.java.pom import PomError, java11_to_17, sanitize_pom, sanitize_repo_poms
from bridge.scoring.java.surefire import parse_reports

TASK = Path(__file__).resolve().parent.parent / "tasks" / "link-shortener"


def test_golden_items_of_the_shipped_task() -> None:
    items = golden_items(TASK / "tests")
    assert len(items) == 11
    assert "com.example.links.RedirectTest::redirectsAndCountsHits" in items


def test_scan_counts_annotated_methods_only() -> None:
    source = """package a.b;
// @Test void commented() {}
/* @Test void blockCommented() {} */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class X {
  @Test
  @DisplayName("x (y)")
  public void one() {}
  @ParameterizedTest(name = "{0}") @ValueSource(strings = {"a", "b"})
  void two(String s) {}
  @org.junit.jupiter.api.Test public static java.util.List<String> three() throws Exception { return null; }
  @RepeatedTest(3) void four() {}
  @TestFactory java.util.stream.Stream<DynamicTest> five() { return null; }
  String s = "@Test void fake()";
  void helper() {}
}"""
    assert scan_source(source, "X") == ["a.b.X::one", "a.b.X::two", "a.b.X::three", "a.b.X::four", "a.b.X::five"]


def test_surefire_reports_map_to_golden_items() -> None:
    xml = b"""<?xml version="1.0"?><testsuite name="a.b.X" tests="4">
      <testcase name="one" classname="a.b.X" time="0.1"/>
      <testcase name="two(String)[1]" classname="a.b.X"/>
      <testcase name="two(String)[2]" classname="a.b.X"><failure message="boom"/></testcase>
      <testcase name="three()" classname="a.b.X$Inner"><skipped/></testcase>
    </testsuite>"""
    results, errors = parse_reports([xml, b"<!DOCTYPE x [<!ENTITY a 'b'>]><testsuite/>", b"not xml"])
    assert len(errors) == 2
    assert [(r.nodeid, r.outcome) for r in results] == [
        ("a.b.X::one", "passed"),
        ("a.b.X::two", "passed"),
        ("a.b.X::two", "failed"),
        ("a.b.X::three", "skipped"),
    ]


def test_sanitize_removes_every_test_gate() -> None:
    pom = (TASK / "pom.xml").read_text()
    assert sanitize_pom(pom).changes == []  # a clean pom is left byte-identical
    hostile = pom.replace(
        "<version>2.22.3</version>",
        "<version>2.22.3</version><configuration><skipTests>true</skipTests>"
        "<testFailureIgnore>true</testFailureIgnore><excludes><exclude>**/*</exclude></excludes>"
        "<includes><include>Nothing</include></includes></configuration>"
        "<executions><execution><id>default-test</id><phase>none</phase></execution></executions>",
    ).replace("<properties>", "<properties><maven.test.skip>true</maven.test.skip><skipTests>true</skipTests>")
    hostile = hostile.replace(
        "</project>",
        "<profiles><profile><id>p</id><activation><activeByDefault>true"
        "</activeByDefault></activation><properties><maven.test.failure.ignore>true"
        "</maven.test.failure.ignore></properties></profile></profiles></project>",
    )
    out = sanitize_pom(hostile)
    for word in (
        "skipTests",
        "testFailureIgnore",
        "<exclude",
        "<include",
        "maven.test.skip",
        "maven.test.failure.ignore",
        "<phase>none",
    ):
        assert word not in out.text, word
    assert len(out.changes) >= 8


def test_sanitize_declares_surefire_and_refuses_dtds(tmp_path: Path) -> None:
    bare = (
        "<project><modelVersion>4.0.0</modelVersion><groupId>a</groupId><artifactId>b</artifactId>"
        "<version>1</version></project>"
    )
    assert "<version>2.22.3</version>" in sanitize_pom(bare).text
    with_parent = bare.replace(
        "<groupId>a", "<parent><groupId>p</groupId><artifactId>q</artifactId><version>1</version></parent><groupId>a"
    )
    assert "surefire" not in sanitize_pom(with_parent).text  # the parent manages it
    with pytest.raises(PomError):
        sanitize_pom('<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><project>&e;</project>')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pom.xml").write_text(
        bare.replace("<version>1</version>", "<version>1</version><properties><skipTests>true</skipTests></properties>")
    )
    (tmp_path / "pom.xml").symlink_to(tmp_path / "sub" / "pom.xml")
    changes = sanitize_repo_poms(tmp_path)
    assert any(c.startswith("sub/pom.xml") for c in changes)
    assert "skipTests" not in (tmp_path / "sub" / "pom.xml").read_text()


def test_java11_to_17_rewrite() -> None:
    pom = (TASK / "pom.xml").read_text()
    assert "<maven.compiler.source>11<" in pom
    out = java11_to_17(pom + "<source>11</source><target>1.11</target><release>11</release>")
    assert "<maven.compiler.source>17<" in out and "<maven.compiler.target>17<" in out
    assert "<source>17</source>" in out and "<target>17</target>" in out
    assert "<release>11</release>" in out  # upstream's sed does not touch <release>


def test_maven_digest_grades_like_the_full_log() -> None:
    noise = "\n".join(f"[INFO] line {i}" for i in range(2000))
    log = (
        "\n>>>>> DSR_START\nDSR_RESULT=true\nDSR_MESSAGE=ok\n>>>>> DSR_END\n>>>>> TEST_START\n"
        + noise
        + "\n[INFO] Tests run: 3, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 1 s - in X\n"
        + noise
        + "\n\x1b[1;31mTests \x1b[0;1mrun: 3\x1b[m, Failures: 1, Errors: 0, Skipped: 0\n"
        "TEST_EXIT_CODE=0\n>>>>> TEST_END\n"
    )
    digest = MavenLogDigest()
    for i in range(0, len(log), 777):
        digest.feed(log[i : i + 777].encode())
    text = digest.text()
    assert len(text) < 1000
    plain = upstream.grade_upstream_log(
        log.replace("\x1b[1;31m", "").replace("\x1b[0;1m", "").replace("\x1b[m", ""), "java"
    )
    assert upstream.grade_upstream_log(text, "java") == plain
    assert plain[1].total == 6 and plain[1].passed == 4  # upstream sums both lines (W11)


def test_missing_artifacts_and_stub_kind() -> None:
    log = (
        "[ERROR] Failed to execute goal on project x: Could not resolve dependencies for project a:b:jar:1: "
        "Cannot access central in offline mode and the artifact com.acme:ghost:jar:1.0 has not been "
        "downloaded from it before.\nRGBRIDGE_MISSING=com.acme:ghost:jar:1.0 org.x:plug:2.0 \n"
    )
    assert missing_artifacts(log) == ["com.acme:ghost:jar:1.0", "org.x:plug:2.0"]
    assert stub_kind({"pom.xml": "<artifactId>junit-jupiter-api</artifactId>"}) == "junit5"
    assert stub_kind({"pom.xml": "<groupId>junit</groupId>"}) == "junit4"
    assert stub_kind({"pom.xml": "<project/>"}) == "none"
    # JUnit 5 through a starter: the golden tests' imports decide (their needs key the layer too)
    starter = {"pom.xml": "<artifactId>spring-boot-starter-test</artifactId>"}
    assert stub_kind(starter) == "none"
    assert stub_kind(starter, "import org.junit.jupiter.api.Test;") == "junit5"
    assert stub_kind({"pom.xml": "<project/>"}, "import org.junit.jupiter.api.Test;") == "none"


def test_result_table_has_a_line_per_language() -> None:
    from rich.console import Console

    from bridge.reports.table import render_table
    from bridge.scoring.result import APICoverage, DSRResult, PassAt1, ProfileResult, ScoreResult
    from bridge.scoring.run.reporting import build_entry

    def score(task: str, lang: str, passed: int) -> ScoreResult:
        def prof(name: str) -> ProfileResult:
            return ProfileResult(
                profile=name,
                outcome="scored",
                dsr=DSRResult(success=True, message="ok"),
                pass_at_1=PassAt1.from_counts(passed, 4 - passed, 0),
                api_coverage=APICoverage(total_apis=2, implemented_apis=2, score=1.0),
            )

        return ScoreResult(
            task_id=task,
            task_hash="t",
            snapshot_hash="s",
            lang=lang,
            port=1,
            framework="x",
            profiles={"compat": prof("compat"), "strict": prof("strict")},
        )

    console = Console(record=True, width=200)
    render_table([build_entry(score("py-task", "python", 4)), build_entry(score("java-task", "java", 1))], console)
    text = console.export_text()
    assert "python (1 scored): compat Pass@1 1.0000" in text
    assert "java (1 scored): compat Pass@1 0.2500" in text and "strict: Pass@1 0.2500" in text


def test_cli_refuses_missing_maven_sources(tmp_path: Path) -> None:
    import subprocess
    import sys

    for flag, message in (
        ("--maven-repo", "Maven repository folder not found"),
        ("--maven-settings", "Maven settings file not found"),
    ):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "bridge.cli",
                "score",
                str(tmp_path),
                "--task",
                "link-shortener",
                flag,
                str(tmp_path / "missing"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode != 0 and message in out.stderr, out.stderr
