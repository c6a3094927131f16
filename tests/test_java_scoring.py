"""End-to-end Java scoring on the real engine (issue 11's acceptance criteria).

One module fixture scores every repo at once (two at a time), each under both profiles:
the oracle, an empty repo, a compile error, a repo failing one golden test with an honest pom
and the same repo with a pom (and planted files) that try to skip, filter or soften the golden
tests, a repo whose App does not match the golden tests, and a pom needing an artifact no
reachable repository has (with and without a `--maven-repo` folder providing it). Online
resolution is disabled (RGBRIDGE_MAVEN_ONLINE=0): no test sends traffic off the machine.
"""

from __future__ import annotations

import contextlib
import http.server
import ipaddress
import os
import shutil
import threading
import uuid
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from bridge.scoring.java.images import ensure_java_image
from bridge.scoring.java.layers import MavenSources, ensure_java_deps_image, repo_poms
from bridge.scoring.java.mavencache import cache_root
from bridge.scoring.result import ScoreResult
from bridge.scoring.run.engine import ScoreOptions, score_repo
from bridge.scoring.types import ScoreRequest
from bridge.tasks.catalog import Catalog

pytestmark = pytest.mark.docker

TASK_ID = "link-shortener"
APP = Path("src/main/java/com/example/links/App.java")
GHOST = (
    "<dependency><groupId>com.rgbridge.fixture</groupId><artifactId>ghost</artifactId>"
    "<version>1.0</version></dependency>\n    <dependency>"
)
HACKED_SUREFIRE = (
    "<version>2.22.3</version><configuration><skipTests>true</skipTests>"
    "<testFailureIgnore>true</testFailureIgnore><excludes><exclude>**/RedirectTest.java</exclude>"
    "</excludes></configuration>"
)
SWALLOW = """package com.example.links;

import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestExecutionExceptionHandler;

public class Swallow implements TestExecutionExceptionHandler {
    @Override
    public void handleTestExecutionException(ExtensionContext context, Throwable throwable) {
    }
}
"""
FAKE_REPORT = (
    '<?xml version="1.0"?><testsuite name="com.example.links.RedirectTest" tests="3">'
    '<testcase name="redirectsAndCountsHits" classname="com.example.links.RedirectTest"/>'
    '<testcase name="unknownCodeIs404" classname="com.example.links.RedirectTest"/>'
    '<testcase name="unknownPathIs404" classname="com.example.links.RedirectTest"/></testsuite>'
)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _ghost_repo(root: Path) -> Path:
    """A user-prepared Maven repository folder holding the one artifact Debian does not have."""
    d = root / "com" / "rgbridge" / "fixture" / "ghost" / "1.0"
    d.mkdir(parents=True)
    with zipfile.ZipFile(d / "ghost-1.0.jar", "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    (d / "ghost-1.0.pom").write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>com.rgbridge.fixture</groupId><artifactId>ghost</artifactId><version>1.0</version></project>\n"
    )
    return root


class Scored:
    def __init__(self, result: ScoreResult, out: Path, leftovers: list[str]) -> None:
        self.result, self.out, self.leftovers = result, out, leftovers


@pytest.fixture(scope="session")
def java_image(docker_client) -> str:
    return ensure_java_image(docker_client)


@pytest.fixture(scope="module")
def scored(docker_client, java_image, tasks_dir: Path, tmp_path_factory):
    saved = os.environ.get("RGBRIDGE_MAVEN_ONLINE")
    os.environ["RGBRIDGE_MAVEN_ONLINE"] = "0"
    task = Catalog.from_options(tasks_dir).get(TASK_ID)
    base = tmp_path_factory.mktemp("java")
    repos: dict[str, Path] = {}

    def variant(name: str) -> Path:
        dest = base / name
        shutil.copytree(task.solution_dir, dest)
        repos[name] = dest
        return dest

    variant("oracle")
    (base / "empty").mkdir()
    repos["empty"] = base / "empty"
    _edit(
        variant("compile-error") / APP,
        "public static void main(String[] args) {",
        "public static void main(String[] args) { int broken = ;",
    )
    _edit(variant("one-failing") / APP, "ex.sendResponseHeaders(302, -1);", "ex.sendResponseHeaders(301, -1);")
    hacked = variant("one-failing-hacked")
    _edit(hacked / APP, "ex.sendResponseHeaders(302, -1);", "ex.sendResponseHeaders(301, -1);")
    _edit(hacked / "pom.xml", "<version>2.22.3</version>", HACKED_SUREFIRE)
    _edit(hacked / "pom.xml", "<properties>", "<properties><maven.test.skip>true</maven.test.skip>")
    # A JUnit extension planted in main code, auto-registered through main resources, that
    # swallows every failure (the pom moves junit-jupiter-api to compile scope for it).
    _edit(hacked / "pom.xml", "<scope>test</scope>", "<scope>compile</scope>")
    services = hacked / "src" / "main" / "resources" / "META-INF" / "services"
    services.mkdir(parents=True)
    (services / "org.junit.jupiter.api.extension.Extension").write_text("com.example.links.Swallow\n")
    (services.parent.parent / "junit-platform.properties").write_text(
        "junit.jupiter.extensions.autodetection.enabled=true\n"
    )
    (hacked / APP).with_name("Swallow.java").write_text(SWALLOW)
    (hacked / ".mvn").mkdir()
    (hacked / ".mvn" / "maven.config").write_text("-DskipTests=true -Dmaven.test.failure.ignore=true\n")
    (hacked / "target" / "surefire-reports").mkdir(parents=True)
    (hacked / "target" / "surefire-reports" / "TEST-com.example.links.RedirectTest.xml").write_text(FAKE_REPORT)
    # Golden tests call App.start(int): an App without it compiles but the golden classes do not.
    wrong = variant("wrong-api")
    _edit(wrong / APP, "public static HttpServer start(int port)", "public static HttpServer begin(int port)")
    _edit(wrong / APP, "start(7080);", "begin(7080);")
    _edit(variant("ghost") / "pom.xml", "<dependency>", GHOST)
    _edit(variant("ghost-with-repo") / "pom.xml", "<dependency>", GHOST)
    maven_repo = _ghost_repo(base / "user-maven-repo")

    def run(name: str) -> Scored:
        out = base / f"out-{name}"
        run_id = f"test-java-{name}"
        maven = MavenSources(repo_dir=maven_repo) if name == "ghost-with-repo" else None
        result = score_repo(
            task,
            repos[name],
            ScoreRequest(profile="both", use_cache=False, output_dir=out, run_id=run_id),
            ScoreOptions(client=docker_client, maven=maven),
        )
        left = docker_client.containers.list(all=True, filters={"label": [f"rgbridge.run_id={run_id}"]})
        return Scored(result, out, [c.name for c in left])

    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="java-score")
    futures: dict[str, Future[Scored]] = {name: pool.submit(run, name) for name in repos}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)
    if saved is None:
        os.environ.pop("RGBRIDGE_MAVEN_ONLINE", None)
    else:
        os.environ["RGBRIDGE_MAVEN_ONLINE"] = saved


def _get(scored, name: str) -> Scored:
    s = scored[name].result(timeout=1500)
    assert s.leftovers == []
    assert set(s.result.profiles) == {"strict", "compat"}
    return s


def test_java_oracle_scores_full_marks_in_both_profiles(scored) -> None:
    s = _get(scored, "oracle")
    assert s.result.lang == "java"
    for name, p in s.result.profiles.items():
        assert p.outcome == "scored", (name, p.outcome, p.error, p.build_error, p.dsr.message)
        assert p.dsr.success, (name, p.dsr.message)
        assert p.pass_at_1.score == 1.0, (name, p.pass_at_1)
        assert p.api_coverage is not None and p.api_coverage.score == 1.0
    strict = s.result.profile("strict")
    assert strict.pass_at_1.total == 11 == len(strict.tests)
    assert {t.outcome for t in strict.tests} == {"passed"}
    assert strict.dsr.message.endswith("on port 7080")  # the black-box check on the task port
    assert strict.dynamic_api_coverage is not None and strict.dynamic_api_coverage.score == 1.0
    # compat grades from Maven's console as upstream does: per-class lines + the Results line (W11).
    compat = s.result.profile("compat")
    assert compat.pass_at_1.total == 22 and compat.pass_at_1.passed == 22
    assert "Tests run: 11, Failures: 0" in (s.out / compat.logs["container"]).read_text()


def test_empty_java_repo_scores_zero_deploy_failed(scored) -> None:
    s = _get(scored, "empty")
    for name, p in s.result.profiles.items():
        assert p.outcome == "deploy_failed", (name, p.outcome, p.error)
        assert not p.dsr.success and p.pass_at_1.score == 0.0
        assert p.dsr.message == "No service entry point found"
    strict = s.result.profile("strict")
    assert strict.pass_at_1.total == 11 and strict.pass_at_1.not_run == 11


def test_compile_error_is_build_failed_with_compiler_output(scored) -> None:
    s = _get(scored, "compile-error")
    strict = s.result.profile("strict")
    assert strict.outcome == "build_failed", (strict.outcome, strict.error)
    assert strict.build_error and "App.java" in strict.build_error and "COMPILATION ERROR" in strict.build_error
    assert strict.pass_at_1.score == 0.0 and strict.pass_at_1.total == 11
    compat = s.result.profile("compat")  # upstream swallows the compile error; nothing passes
    assert compat.pass_at_1.passed == 0


def test_hacked_pom_cannot_raise_the_strict_score(scored) -> None:
    honest = _get(scored, "one-failing").result.profile("strict")
    hacked = _get(scored, "one-failing-hacked")
    strict = hacked.result.profile("strict")
    assert honest.pass_at_1.passed == 10 and honest.pass_at_1.total == 11, honest.pass_at_1
    assert strict.pass_at_1.passed == honest.pass_at_1.passed and strict.pass_at_1.total == 11, strict.pass_at_1
    failed = [t.nodeid for t in strict.tests if t.outcome != "passed"]
    assert failed == ["com.example.links.RedirectTest::redirectsAndCountsHits"]
    rewrite = (hacked.out / strict.logs["pom-rewrite"]).read_text()
    assert "skipTests" in rewrite and "testFailureIgnore" in rewrite and "excludes" in rewrite


def test_golden_classes_that_do_not_compile_count_as_not_passed(scored) -> None:
    s = _get(scored, "wrong-api")
    strict = s.result.profile("strict")
    assert strict.outcome == "scored" and strict.dsr.success, (strict.outcome, strict.dsr.message)
    assert strict.pass_at_1.total == 11 and strict.pass_at_1.passed == 0
    assert strict.error and "did not compile" in strict.error and "start" in strict.error


def test_unreachable_artifact_is_infra_error_naming_it(scored) -> None:
    s = _get(scored, "ghost")
    for name, p in s.result.profiles.items():
        assert p.outcome == "infra_error", (name, p.outcome, p.build_error)
        assert "com.rgbridge.fixture:ghost" in (p.error or ""), (name, p.error)


def test_maven_repo_folder_provides_the_missing_artifact(scored) -> None:
    s = _get(scored, "ghost-with-repo")
    for name, p in s.result.profiles.items():
        assert p.outcome == "scored" and p.pass_at_1.score == 1.0, (name, p.outcome, p.error, p.pass_at_1)


def _bridge_gateway(client) -> str:
    """The host's address on the engine's default bridge (where build containers run)."""
    config = (client.networks.get("bridge").attrs.get("IPAM") or {}).get("Config") or [{}]
    gateway = config[0].get("Gateway")
    if gateway:
        return gateway.split("/")[0]
    subnet = ipaddress.ip_network(config[0]["Subnet"])
    return str(next(subnet.hosts()))


def test_maven_settings_mirror_resolves_at_layer_build(
    docker_client, java_image, tasks_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """--maven-settings: a mirror (served on this machine) provides what Debian lacks; the online
    step runs at layer build time only, and the score is the oracle's. What it downloaded lands in
    the shared Maven cache, from which a layer for another pom then resolves with no network."""
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path / "cache"))  # an empty shared cache
    before = {i.id for i in docker_client.images.list(filters={"label": "rgbridge.kind=jdeps"})}
    try:
        _mirror_then_cache(docker_client, tasks_dir, tmp_path)
    finally:  # these layers have one-off keys (random mirror port, nonce version): drop them
        for image in docker_client.images.list(filters={"label": "rgbridge.kind=jdeps"}):
            if image.id not in before:
                for tag in image.tags:
                    with contextlib.suppress(Exception):
                        docker_client.images.remove(tag)


def _mirror_then_cache(docker_client, tasks_dir: Path, tmp_path: Path) -> None:
    repo_root = _ghost_repo(tmp_path / "mirror")
    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(repo_root), **kwargs)

        def log_message(self, fmt: str, *args) -> None:
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings = tmp_path / "settings.xml"
        settings.write_text(
            "<settings><mirrors><mirror><id>test-mirror</id><mirrorOf>*</mirrorOf>"
            f"<url>http://{_bridge_gateway(docker_client)}:{server.server_address[1]}/</url>"
            "</mirror></mirrors></settings>\n"
        )
        task = Catalog.from_options(tasks_dir).get(TASK_ID)
        repo = tmp_path / "repo"
        shutil.copytree(task.solution_dir, repo)
        _edit(repo / "pom.xml", "<dependency>", GHOST)
        result = score_repo(
            task,
            repo,
            ScoreRequest(profile="strict", use_cache=False, output_dir=tmp_path / "out", run_id="test-java-mirror"),
            ScoreOptions(client=docker_client, maven=MavenSources(settings=settings, online=True)),
        )
    finally:
        server.shutdown()
    strict = result.profile("strict")
    assert strict.outcome == "scored" and strict.pass_at_1.score == 1.0, (strict.outcome, strict.error)
    assert any("ghost-1.0.pom" in path for path in requests), requests
    cached = cache_root() / "com" / "rgbridge" / "fixture" / "ghost" / "1.0" / "ghost-1.0.jar"
    assert cached.is_file()

    # Another pom needing the same artifact: no settings, online resolution off, no user repo.
    _edit(repo / "pom.xml", "<version>1.0.0</version>", f"<version>1.0.1-{uuid.uuid4().hex[:8]}</version>")
    layer = ensure_java_deps_image(docker_client, repo_poms(repo), sources=MavenSources(online=False))
    assert not layer.cached and "RGBRIDGE_RESOLVED=cache" in layer.log_tail, layer.log_tail[-2000:]
