"""Java dependency layers: the Java image + what a project's poms need, keyed by the poms.

``rgbridge-jdeps:<hash12>`` is built ``FROM`` the Java image (``docker_build``, labelled, timed)
and keyed by the repo's ``pom.xml`` files, the stub the golden tests need (JUnit 5 / 4 / none),
the user's Maven repository folder (digest) and settings file (digest). Its build runs
``assets/java_resolve.sh``: the project's lifecycle up to ``test`` on a stub main class and stub
test, first offline against the image's local repository (Debian's packaged artifacts plus
``--maven-repo DIR``), then, only if artifacts are missing, online through Maven's configured
repositories or ``--maven-settings FILE``. The local repository ``/opt/m2/repository`` is the
shared cache: each layer adds to the image's copy, and scoring containers run Maven offline.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import DockerException

from bridge.errors import ScoringError
from bridge.scoring.images.base import APP_GID, APP_UID, build_lock, docker_build, hash12, image_exists, say
from bridge.scoring.images.disk import lease, make_room
from bridge.scoring.images.sets import DepsImage
from bridge.scoring.java.images import LOCAL_REPO, ensure_java_image
from bridge.scoring.java.mavencache import cache_settings, export_downloads, serve_cache
from bridge.scoring.run.workdir import ASSETS
from bridge.scoring.types import ProgressFn

JDEPS_REPO = "rgbridge-jdeps"
JDEPS_RECIPE_VERSION = "3"
BUILD_DIR = "/tmp/rgbridge-build"
MAX_POMS = 200
MAX_POM_BYTES = 1_000_000

_COORD = re.compile(
    r"[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:(?:jar|pom|war|maven-plugin|test-jar)"
    r"(?::[A-Za-z0-9_.-]+)?:[A-Za-z0-9_.-]+"
)

STUB_MAIN = "public class RgbridgeStubMain {\n}\n"
STUB_TESTS = {
    "junit5": (
        "import org.junit.jupiter.api.Test;\n\nclass RgbridgeStubTest {\n    @Test\n    void stub() {\n    }\n}\n"
    ),
    "junit4": (
        "import org.junit.Test;\n\npublic class RgbridgeStubTest {\n    @Test\n    public void stub() {\n    }\n}\n"
    ),
}


class JavaDependencyError(ScoringError):
    """The layer could not be built. ``kind``: ``unreachable`` (artifacts missing and no
    repository could provide them: not the agent's fault), ``not_found`` (a reachable repository
    does not have them) or ``build_failed`` (the pom itself is broken); ``timeout``."""

    def __init__(self, message: str, *, kind: str, missing: list[str] | None = None, log_tail: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.missing = missing or []
        self.log_tail = log_tail


@dataclass(frozen=True)
class MavenSources:
    """Where a layer may resolve from besides Debian's repository (CLI: --maven-repo,
    --maven-settings; environment: RGBRIDGE_MAVEN_REPO, RGBRIDGE_MAVEN_SETTINGS)."""

    repo_dir: Path | None = None
    settings: Path | None = None
    #: may the layer build resolve online when the local repository misses artifacts?
    #: None = the RGBRIDGE_MAVEN_ONLINE environment variable (default yes)
    online: bool | None = None

    def allows_online(self) -> bool:
        if self.online is not None:
            return self.online
        return os.environ.get("RGBRIDGE_MAVEN_ONLINE", "1").lower() not in ("0", "no", "false")

    @classmethod
    def from_env(cls, repo_dir: Path | None = None, settings: Path | None = None) -> MavenSources:
        repo = repo_dir or (Path(os.environ["RGBRIDGE_MAVEN_REPO"]) if os.environ.get("RGBRIDGE_MAVEN_REPO") else None)
        sett = settings or (
            Path(os.environ["RGBRIDGE_MAVEN_SETTINGS"]) if os.environ.get("RGBRIDGE_MAVEN_SETTINGS") else None
        )
        if repo is not None and not repo.expanduser().is_dir():
            raise ScoringError(f"Maven repository folder not found: {repo}")
        if sett is not None and not sett.expanduser().is_file():
            raise ScoringError(f"Maven settings file not found: {sett}")
        return cls(repo.expanduser() if repo else None, sett.expanduser() if sett else None)


def repo_poms(repo: Path) -> dict[str, str]:
    """Every regular pom.xml of a repo (relative path -> text), never through a symlink."""
    out: dict[str, str] = {}
    for path in sorted(repo.rglob("pom.xml")):
        if path.is_symlink() or not path.is_file() or "target" in path.relative_to(repo).parts:
            continue
        if len(out) >= MAX_POMS:
            break
        data = path.read_bytes()[:MAX_POM_BYTES]
        out[path.relative_to(repo).as_posix()] = data.decode("utf-8", errors="replace")
    return out


def test_sources_text(repo: Path, limit: int = 2_000_000) -> str:
    """The repo's `src/test` Java sources (the golden ones, in a scoring copy), concatenated."""
    out: list[str] = []
    size = 0
    test_dir = repo / "src" / "test"
    for path in sorted(test_dir.rglob("*.java")) if test_dir.is_dir() and not test_dir.is_symlink() else []:
        if path.is_file() and not path.is_symlink() and size < limit:
            text = path.read_bytes()[: limit - size].decode("utf-8", errors="replace")
            out.append(text)
            size += len(text)
    return "\n".join(out)


def stub_kind(poms: dict[str, str], tests_text: str = "") -> str:
    """Which stub test exercises the test runtime the build will need (JUnit 5, 4 or none):
    the pom's own test dependencies, or the golden tests' imports when the pom brings JUnit in
    through a starter or BOM (spring-boot-starter-test, quarkus-junit5, ...)."""
    root = poms.get("pom.xml", "")
    via_starter = re.search(r"starter-test|junit5|junit-bom|test-junit", root) is not None
    if "junit-jupiter" in root or ("org.junit.jupiter" in tests_text and via_starter):
        return "junit5"
    if re.search(r"<groupId>\s*junit\s*</groupId>", root) or ("org.junit." in tests_text and via_starter):
        return "junit4"
    return "none"


def _repo_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file() and not p.is_symlink():
            st = p.stat()
            h.update(f"{p.relative_to(path).as_posix()}\0{st.st_size}\0{int(st.st_mtime)}\n".encode())
    return h.hexdigest()[:12]


def jdeps_tag(base: str, poms: dict[str, str], sources: MavenSources, kind: str | None = None) -> str:
    repo = _repo_digest(sources.repo_dir) if sources.repo_dir else None
    settings = hashlib.sha256(sources.settings.read_bytes()).hexdigest()[:12] if sources.settings else None
    key = hash12(
        "jdeps",
        JDEPS_RECIPE_VERSION,
        base,
        sorted(poms.items()),
        kind or stub_kind(poms),
        repo,
        settings,
        sources.allows_online(),
    )
    return f"{JDEPS_REPO}:{key}"


def _pack_repo(src: Path, dest: Path) -> None:
    """The user's Maven repository folder as one tar (regular files and dirs only)."""
    with tarfile.open(dest, "w") as tar:
        for path in sorted(src.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            info = tar.gettarinfo(str(path), arcname=path.relative_to(src).as_posix())
            info.uid, info.gid, info.uname, info.gname = APP_UID, APP_GID, "", ""
            info.mode = 0o755 if path.is_dir() else 0o644
            if path.is_dir():
                tar.addfile(info)
            else:
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)


def missing_artifacts(log: str) -> list[str]:
    """Coordinates named by resolve.sh's RGBRIDGE_MISSING line (artifacts and plugins), else
    any coordinates in Maven's errors."""
    marker = re.findall(r"RGBRIDGE_MISSING=(.*)", log)
    if marker and marker[-1].split():
        found = [tok for tok in marker[-1].split() if tok.count(":") >= 2]
    else:
        found = _COORD.findall(log)
    return sorted(dict.fromkeys(found))


def ensure_java_deps_image(
    client: docker.DockerClient,
    poms: dict[str, str],
    *,
    sources: MavenSources | None = None,
    tests_text: str = "",
    timeout: float = 900,
    progress: ProgressFn | None = None,
) -> DepsImage:
    """The layer for these poms (built if missing); `tests_text` = the test sources the build will
    compile (their JUnit flavour picks the stub test). Raises JavaDependencyError."""
    sources = sources or MavenSources()
    base = ensure_java_image(client, progress=progress)
    if "pom.xml" not in poms:
        return DepsImage(tag=base, cached=True, seconds=0.0)
    kind = stub_kind(poms, tests_text)
    tag = jdeps_tag(base, poms, sources, kind)
    lease(client, tag)  # in use (never evicted) while this score holds it; its last use
    if image_exists(client, tag):
        return DepsImage(tag=tag, cached=True, seconds=0.0)
    started = time.monotonic()
    with build_lock(tag):
        if image_exists(client, tag):
            return DepsImage(tag=tag, cached=True, seconds=time.monotonic() - started)
        make_room(client, kind="java-layer", progress=progress)
        files: dict[str, bytes] = {f"build/project/{rel}": text.encode() for rel, text in poms.items()}
        files["build/project/src/main/java/RgbridgeStubMain.java"] = STUB_MAIN.encode()
        if kind in STUB_TESTS:
            files["build/project/src/test/java/RgbridgeStubTest.java"] = STUB_TESTS[kind].encode()
        files["build/resolve.sh"] = (ASSETS / "java_resolve.sh").read_bytes()
        if sources.settings:
            files["build/settings.xml"] = sources.settings.read_bytes()
        with tempfile.TemporaryDirectory(prefix="rgbridge-mvnrepo-") as tmp, serve_cache(client) as cache_url:
            if cache_url:
                files["build/cache-settings.xml"] = cache_settings(cache_url, LOCAL_REPO).encode()
            dirs: dict[str, Path] = {}
            if sources.repo_dir:
                _pack_repo(sources.repo_dir, Path(tmp) / "maven-repo.tar")
                dirs["build/repo"] = Path(tmp)
            env = f"RGBRIDGE_MAVEN_ONLINE={1 if sources.allows_online() else 0} HOME=/tmp"
            # The build copy and the resolution's target/ go; only the local repository stays.
            body = (
                f"COPY --chown={APP_UID}:{APP_GID} build {BUILD_DIR}\n"
                f"USER {APP_UID}:{APP_GID}\n"
                f"RUN env {env} bash {BUILD_DIR}/resolve.sh && rm -rf {BUILD_DIR} "
                f"{LOCAL_REPO}/RgbridgeStub* /tmp/.m2\n"
                "USER root\n"
            )
            res = docker_build(
                client,
                dockerfile_body=body,
                base=base,
                tag=tag,
                kind="jdeps",
                files=files,
                dirs=dirs,
                timeout=timeout,
                progress=progress,
            )
        if res.ok:
            if "RGBRIDGE_RESOLVED=online" in res.log_tail:
                try:
                    added = export_downloads(client, tag, LOCAL_REPO)
                    say(progress, f"{added} downloaded Maven file(s) added to the shared cache")
                except (DockerException, OSError, tarfile.TarError) as exc:  # the cache is only a speed-up
                    say(progress, f"shared Maven cache not updated: {exc}")
            return DepsImage(tag=tag, cached=False, seconds=time.monotonic() - started, log_tail=res.log_tail)
        if res.timed_out:
            raise JavaDependencyError(
                f"Maven dependency resolution timed out after {timeout:.0f}s", kind="timeout", log_tail=res.log_tail
            )
        log = res.log_tail
        outcome = re.findall(r"RGBRIDGE_RESOLUTION=(\w+)", log)
        kind_found = outcome[-1] if outcome else "build_failed"
        missing = missing_artifacts(log) if kind_found in ("unreachable", "not_found") else []
        if kind_found == "unreachable":
            names = ", ".join(missing) or "(see build.log)"
            msg = f"Maven artifacts missing and no reachable repository has them: {names}"
        elif kind_found == "not_found":
            msg = f"Maven artifacts not found in the reachable repositories: {', '.join(missing)}"
        else:
            errors = [ln.strip() for ln in log.splitlines() if "[ERROR]" in ln]
            msg = "Maven build of the pom failed: " + (errors[0][:300] if errors else res.error)
        raise JavaDependencyError(msg, kind=kind_found, missing=missing, log_tail=log)
