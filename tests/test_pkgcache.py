"""The host package cache, requirement normal form, and agent requirements never running on the host.

Unit tests (no engine) cover the content-addressed wheel cache (hit, miss, corrupt entry,
LRU eviction and its cap), requirement normalisation and the refusal rules. Engine tests build
real dependency layers with the cache in a private RGBRIDGE_CACHE folder (empty at the start:
CI on a fresh machine), and score a repo whose requirements.txt names the agent's own folder
in wheelhouse mode (issue 8, opening 2).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

import pytest

from bridge.locations import cache_dir
from bridge.scoring.images.base import (
    UnsafeRequirementError,
    check_requirements,
    ensure_base_image,
    image_exists,
    index_reachable_from_containers,
    prepare_wheelhouse,
    reqfile,
)
from bridge.scoring.images.disk import WheelCache, pkgcache
from bridge.scoring.images.sets import deps_image_tag, ensure_deps_image, wait_for_cache_fills
from bridge.scoring.run.engine import ScoreOptions, score_repo
from bridge.scoring.types import ScoreRequest
from bridge.tasks.catalog import Catalog


def _wheel(folder: Path, name: str, payload: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(payload)
    return path


# ---------------------------------------------------------------- requirement files


def test_equivalent_requirement_files_normalise_alike():
    a = "fastapi==0.115.14\nuvicorn==0.32.1  # server\n\n# comment\npydantic==2.11.7\n"
    b = "\r\n  pydantic==2.11.7\r\n# other comment\r\nuvicorn==0.32.1\nfastapi==0.115.14\nfastapi==0.115.14\n"
    c = "pydantic==2.11.7\nuvicorn==\\\n0.32.1\nfastapi==0.115.14"
    assert reqfile.normalise(a) == reqfile.normalise(b) == "fastapi==0.115.14\npydantic==2.11.7\nuvicorn==0.32.1\n"
    assert reqfile.normalise(c) == reqfile.normalise(a)  # a continued line is one requirement
    assert deps_image_tag("b:1", a) == deps_image_tag("b:1", b)
    assert deps_image_tag("b:1", a) != deps_image_tag("b:1", a + "six==1.16.0\n")
    # '#' inside a token is not a comment (pip needs whitespace before it): URL fragments stay.
    assert reqfile.logical_lines("pkg @ https://h/p.whl#sha256=ab") == ["pkg @ https://h/p.whl#sha256=ab"]
    assert reqfile.normalise("# only comments\n\n") == ""


@pytest.mark.parametrize(
    "line",
    [
        "./evil",
        "/abs/evil",
        "-e .",
        "-e ./evil",
        "--editable=./evil",
        "-r other.txt",
        "-c constraints.txt",
        "evil.tar.gz",
        "sub/dir",
        "pkg @ file:///tmp/evil",
        "file:///tmp/evil",
        "~/evil",
    ],
)
def test_local_paths_are_refused_everywhere(line):
    assert reqfile.local_path_reason(line) is not None
    assert reqfile.host_fetch_reason(line) is not None
    with pytest.raises(UnsafeRequirementError, match="local path"):
        check_requirements(f"six==1.16.0\n{line}\n")


@pytest.mark.parametrize(
    "line",
    [
        "git+https://example.invalid/x.git",
        "pkg @ https://example.invalid/p.whl",
        "-e git+https://example.invalid/x.git#egg=x",
        "--index-url http://127.0.0.1:9/",
        "six==1.16.0 --install-option=--x",
    ],
)
def test_host_fetch_accepts_named_requirements_only(line):
    assert reqfile.local_path_reason(line) is None  # fine inside a container build
    assert reqfile.host_fetch_reason(line) is not None
    with pytest.raises(UnsafeRequirementError):
        prepare_wheelhouse(f"{line}\n", Path("/nonexistent-never-used"))


@pytest.mark.parametrize(
    "line",
    [
        "six==1.16.0",
        "Django>=4,<5",
        "numpy ; python_version > '3.8'",
        "requests[socks]==2.32.3",
        "six==1.16.0 --hash=sha256:" + "0" * 64,
    ],
)
def test_named_requirements_may_be_fetched_on_the_host(line):
    assert reqfile.host_fetch_reason(line) is None


# ---------------------------------------------------------------- wheel cache


def test_cache_miss_then_hit(tmp_path):
    cache = WheelCache(tmp_path / "wheels", max_bytes=0)
    assert cache.entries() == []  # a fresh machine: empty, no error
    src = _wheel(tmp_path / "dl", "six-1.16.0-py2.py3-none-any.whl", b"wheel-bytes")
    entry = cache.add(src)
    assert entry is not None and entry.sha256 == hashlib.sha256(b"wheel-bytes").hexdigest()
    assert entry.path == tmp_path / "wheels" / entry.sha256 / src.name
    assert cache.import_dir(tmp_path / "dl") == 0  # the same content again: a hit, nothing new
    with cache.view() as view:
        assert (view / "flat" / src.name).read_bytes() == b"wheel-bytes"
        page = (view / "simple" / "six" / "index.html").read_text()
        assert f"../../flat/{src.name}#sha256={entry.sha256}" in page
    assert not view.exists()  # views are per build


def test_cache_refuses_non_wheels_and_wrong_hashes(tmp_path):
    cache = WheelCache(tmp_path / "wheels", max_bytes=0)
    dl = tmp_path / "dl"
    _wheel(dl, "evil-1.0.tar.gz", b"sdist")
    _wheel(dl, "ok-1.0-py3-none-any.whl", b"ok")
    _wheel(dl, "swapped-1.0-py3-none-any.whl", b"tampered after listing")
    (dl / "link-1.0-py3-none-any.whl").symlink_to(dl / "ok-1.0-py3-none-any.whl")
    expected = {
        "ok-1.0-py3-none-any.whl": hashlib.sha256(b"ok").hexdigest(),
        "swapped-1.0-py3-none-any.whl": hashlib.sha256(b"original").hexdigest(),
        "link-1.0-py3-none-any.whl": hashlib.sha256(b"ok").hexdigest(),
    }
    assert cache.import_dir(dl, expected=expected) == 1
    assert [e.name for e in cache.entries()] == ["ok-1.0-py3-none-any.whl"]


def test_corrupt_entry_is_dropped_never_used(tmp_path):
    cache = WheelCache(tmp_path / "wheels", max_bytes=0)
    entry = cache.add(_wheel(tmp_path / "dl", "six-1.16.0-py2.py3-none-any.whl", b"good"))
    assert entry is not None
    assert cache.verify(entry.path.parent) is not None  # stamps the verified state
    entry.path.write_bytes(b"evil")  # same name, different content (disk fault, tampering)
    with cache.view() as view:
        assert not (view / "flat" / entry.name).exists()
        assert not (view / "simple" / "six").exists()
    assert not entry.path.parent.exists()  # deleted: the next build fetches it again
    assert cache.add(tmp_path / "dl" / entry.name) is not None  # refetched content is accepted


def test_lru_eviction_keeps_recent_entries_under_the_cap(tmp_path):
    cache = WheelCache(tmp_path / "wheels", max_bytes=2500)
    names = ["a-1-py3-none-any.whl", "b-1-py3-none-any.whl", "c-1-py3-none-any.whl"]
    entries = []
    for i, name in enumerate(names):
        entry = cache.add(_wheel(tmp_path / "dl", name, bytes([i]) * 1000))
        assert entry is not None
        os.utime(entry.path.parent, (1000 + i, 1000 + i))
        entries.append(entry)
    # "a" is the oldest but is used again now, so "b" becomes the least recently used.
    assert cache.add(entries[0].path) is not None
    removed = cache.evict()
    assert [p.name for p in removed] == [entries[1].sha256]
    assert sorted(e.name for e in cache.entries()) == [names[0], names[2]]
    assert WheelCache(tmp_path / "wheels", max_bytes=0).evict() == []  # 0 = no cap


def test_cache_caps_are_configurable(monkeypatch):
    monkeypatch.delenv("RGBRIDGE_WHEEL_CACHE_MAX_MB", raising=False)
    assert pkgcache.cache_limit_bytes("wheel") == pkgcache.DEFAULT_MAX_MB * 1024 * 1024
    monkeypatch.setenv("RGBRIDGE_WHEEL_CACHE_MAX_MB", "1.5")
    assert pkgcache.cache_limit_bytes("wheel") == int(1.5 * 1024 * 1024)
    monkeypatch.setenv("RGBRIDGE_MAVEN_CACHE_MAX_MB", "0")
    assert pkgcache.cache_limit_bytes("maven") == 0


# ---------------------------------------------------------------- real engine


@pytest.fixture()
def private_cache(monkeypatch, tmp_path) -> Path:
    root = tmp_path / "rgcache"
    probe = cache_dir() / "index_probe.json"  # the caller's cache, wherever it is
    monkeypatch.setenv("RGBRIDGE_CACHE", str(root))
    monkeypatch.delenv("RGBRIDGE_WHEEL_CACHE", raising=False)  # the wheels too go to the private cache
    root.mkdir()
    if probe.is_file():  # the probe's answer, so the test does not spend 45 s re-probing
        shutil.copyfile(probe, root / "index_probe.json")
    return root


def _nonce_reqs(base: str) -> str:
    return f"{base}six>=0.0.{time.time_ns()}\n"  # a never-seen requirements set


def _forget(client, tag: str) -> None:
    if image_exists(client, tag):
        client.images.remove(tag, force=True)


@pytest.mark.docker
def test_layers_fill_then_reuse_the_cache_and_refetch_corrupt_entries(docker_client, private_cache):
    if not index_reachable_from_containers(docker_client):
        pytest.skip("containers cannot reach the package index here (wheelhouse test covers that mode)")
    base = ensure_base_image(docker_client)
    tags = []
    try:
        first = ensure_deps_image(docker_client, _nonce_reqs("six==1.16.0\n"), timeout=300)
        tags.append(first.tag)
        assert first.uncached == ("six==1.16.0",)  # downloaded by the build, then fetched by the host
        assert wait_for_cache_fills(300)  # the host's fill runs after the build, off the score's path
        cached = list((private_cache / "wheels").glob("*/six-1.16.0-py2.py3-none-any.whl"))
        assert len(cached) == 1 and pkgcache.sha256_file(cached[0]) == cached[0].parent.name
        config = docker_client.images.get(first.tag).attrs["Config"]
        base_config = docker_client.images.get(base).attrs["Config"]
        assert config["Cmd"] == base_config["Cmd"] and config["WorkingDir"] == base_config["WorkingDir"]
        assert config["User"] == base_config["User"] and config["Env"] == base_config["Env"]
        assert not config.get("Volumes") and config["Labels"]["rgbridge.kind"] == "deps"

        second = ensure_deps_image(docker_client, _nonce_reqs("six==1.16.0\n"), timeout=300)
        tags.append(second.tag)
        assert second.uncached == ()  # served by the cache
        assert "RGBRIDGE_INSTALLER=uv" in second.log_tail

        cached[0].write_bytes(b"corrupt")
        third = ensure_deps_image(docker_client, _nonce_reqs("six==1.16.0\n"), timeout=300)
        tags.append(third.tag)
        assert third.uncached == ("six==1.16.0",)  # the corrupt entry was not offered
        assert wait_for_cache_fills(300)
        again = list((private_cache / "wheels").glob("*/six-1.16.0-py2.py3-none-any.whl"))
        assert len(again) == 1 and again[0].read_bytes() != b"corrupt"
        assert pkgcache.sha256_file(again[0]) == again[0].parent.name
        from bridge.scoring.sandbox.containers import create_container, managed, read_logs, wait_with_timeout
        from bridge.scoring.sandbox.protocol import SandboxLimits

        c = create_container(
            docker_client,
            third.tag,
            name=f"rgbridge-test-cache-{time.time_ns()}",
            command=["sh", "-c", ("python -c 'import six; print(six.__version__)'; ls /tmp/rgbridge-build 2>&1")],
            labels={"rgbridge.kind": "test"},
            limits=SandboxLimits(),
        )
        with managed(c):
            c.start()
            wait_with_timeout(c, 60)
            out = read_logs(c)
        assert "1.16.0" in out and "No such file" in out  # installed; build files not in the layer
    finally:
        for tag in tags:
            _forget(docker_client, tag)


@pytest.mark.docker
def test_equivalent_requirement_files_share_one_layer(docker_client, private_cache):
    nonce = time.time_ns()
    a = f"six==1.16.0\nsix>=0.0.{nonce}\n"
    b = f"# the same set, reordered and commented\nsix>=0.0.{nonce}   # floor\n\n  six==1.16.0\n"
    first = ensure_deps_image(docker_client, a, timeout=300)
    try:
        again = ensure_deps_image(docker_client, b, timeout=300)
        assert again.tag == first.tag and again.cached
    finally:
        _forget(docker_client, first.tag)


EVIL_SETUP = """from pathlib import Path
from setuptools import setup
Path({marker!r}).write_text("the agent's setup.py ran here")
setup(name="evil", version="1.0")
"""


@pytest.mark.docker
@pytest.mark.parametrize("spelling", ["relative", "absolute"])
def test_wheelhouse_mode_never_builds_the_agents_folder_on_the_host(
    docker_client, private_cache, monkeypatch, tmp_path, tasks_dir, spelling
):
    """Issue 8, opening 2: requirements.txt naming a local folder made the host's pip build it
    (the agent's setup.py ran on the host as root). Now: build_failed with the reason, no marker."""
    monkeypatch.setenv("RGBRIDGE_INDEX_FROM_CONTAINERS", "0")  # the host-side wheelhouse fallback
    task = Catalog.from_options(tasks_dir).get("kv-ledger")
    repo = tmp_path / "repo"
    shutil.copytree(task.solution_dir, repo)
    marker = tmp_path / "host-marker"
    (repo / "evil").mkdir()
    (repo / "evil" / "setup.py").write_text(EVIL_SETUP.format(marker=str(marker)))
    line = "./evil" if spelling == "relative" else str(repo / "evil")
    reqs = (repo / "requirements.txt").read_text() if (repo / "requirements.txt").is_file() else ""
    (repo / "requirements.txt").write_text(reqs + f"{line}\n")
    monkeypatch.chdir(repo)  # where a host pip would resolve ./evil
    result = score_repo(
        task,
        repo,
        ScoreRequest(profile="both", use_cache=False, output_dir=tmp_path / "out", run_id=f"test-evil-req-{spelling}"),
        ScoreOptions(client=docker_client),
    )
    assert not marker.exists()
    for name in ("strict", "compat"):
        p = result.profile(name)
        assert p.outcome == "build_failed", (name, p.outcome, p.error)
        assert "local path" in (p.build_error or "") and line in (p.build_error or ""), p.build_error
        assert not p.dsr.success
    assert not marker.exists()


# ---------------------------------------------------------------- Maven repository cache (same policy)


def _artifact(root: Path, rel: str, size: int, used: float) -> Path:
    folder = root / rel
    folder.mkdir(parents=True)
    (folder / f"{folder.parent.name}-{folder.name}.jar").write_bytes(b"j" * size)
    (folder / f"{folder.parent.name}-{folder.name}.pom").write_bytes(b"<project/>")
    os.utime(folder, (used, used))
    return folder


def test_maven_cache_evicts_least_recently_used_versions(tmp_path, monkeypatch):
    from bridge.scoring.java import mavencache

    root = tmp_path / "maven-repo"
    old = _artifact(root, "org/example/lib/1.0", 1000, 1000)
    mid = _artifact(root, "org/example/lib/2.0", 1000, 2000)
    new = _artifact(root, "com/other/tool/3.1", 1000, 3000)
    monkeypatch.setenv("RGBRIDGE_MAVEN_CACHE_MAX_MB", str(2100 / 1024 / 1024))
    assert mavencache.evict(root) == [old]
    assert not old.exists() and mid.is_dir() and new.is_dir()
    assert mavencache.evict(root, max_bytes=1100) == [mid]
    assert not (root / "org" / "example").exists()  # empty parents go too
    assert mavencache.evict(root, max_bytes=0) == []


def test_maven_cache_serving_marks_a_version_used(tmp_path, monkeypatch):
    import functools
    import urllib.request

    from bridge.scoring.java import mavencache
    from tests.loopback import LoopbackServer

    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path))
    root = mavencache.cache_root()
    folder = _artifact(root, "org/example/lib/1.0", 10, 1000)
    handler = functools.partial(mavencache._ReadOnly, directory=str(root))
    with LoopbackServer(handler) as server:
        url = f"{server.url}/org/example/lib/1.0/lib-1.0.jar"
        assert urllib.request.urlopen(url, timeout=10).read() == b"j" * 10
    assert folder.stat().st_mtime > time.time() - 60  # its LRU clock moved to now


@pytest.mark.docker
def test_uv_installs_exactly_what_pip_would(docker_client, private_cache, monkeypatch):
    """The fast installer (uv, resolving with pip's rules) gives the same installed set as a
    pip-only layer, for requirements with unpinned transitive dependencies."""
    if not index_reachable_from_containers(docker_client):
        pytest.skip("containers cannot reach the package index here")
    from bridge.scoring.sandbox.containers import create_container, managed, read_logs, wait_with_timeout
    from bridge.scoring.sandbox.protocol import SandboxLimits

    def freeze(tag: str) -> str:
        c = create_container(
            docker_client,
            tag,
            name=f"rgbridge-test-freeze-{time.time_ns()}",
            command=["python", "-m", "pip", "freeze", "--all"],
            labels={"rgbridge.kind": "test"},
            limits=SandboxLimits(),
        )
        with managed(c):
            c.start()
            wait_with_timeout(c, 120)
            return read_logs(c)

    tags = []
    try:
        monkeypatch.setenv("RGBRIDGE_INSTALLER", "pip")
        by_pip = ensure_deps_image(docker_client, _nonce_reqs("requests==2.32.3\n"), timeout=600)
        tags.append(by_pip.tag)
        monkeypatch.delenv("RGBRIDGE_INSTALLER")
        by_uv = ensure_deps_image(docker_client, _nonce_reqs("requests==2.32.3\n"), timeout=600)
        tags.append(by_uv.tag)
        assert "RGBRIDGE_INSTALLER=pip" in by_pip.log_tail and "RGBRIDGE_INSTALLER=uv" not in by_pip.log_tail
        assert "RGBRIDGE_INSTALLER=uv" in by_uv.log_tail, by_uv.log_tail
        pip_set, uv_set = freeze(by_pip.tag), freeze(by_uv.tag)
        assert "requests==2.32.3" in pip_set and "urllib3==" in pip_set
        assert sorted(pip_set.split()) == sorted(uv_set.split())
    finally:
        for tag in tags:
            _forget(docker_client, tag)


@pytest.mark.docker
def test_wheelhouse_mode_uses_and_fills_the_cache(docker_client, private_cache, monkeypatch):
    """Containers without the index: the host fetches binary wheels (cached ones copied from the
    cache, not downloaded), the cache keeps them, the layer (requirements + extras, as compat
    builds it) installs with no network."""
    monkeypatch.setenv("RGBRIDGE_INDEX_FROM_CONTAINERS", "0")
    tags = []
    try:
        lines: list[str] = []
        reqs = _nonce_reqs("six==1.16.0\n")
        first = ensure_deps_image(
            docker_client, reqs, extra_packages=["six==1.16.0"], timeout=300, progress=lines.append
        )
        tags += [first.tag, deps_image_tag(ensure_base_image(docker_client), reqs)]
        assert list((private_cache / "wheels").glob("*/six-1.16.0-py2.py3-none-any.whl"))
        assert "Looking in links" in first.log_tail  # --no-index install from the wheelhouse
        lines.clear()
        second = ensure_deps_image(docker_client, _nonce_reqs("six==1.16.0\n"), timeout=300, progress=lines.append)
        tags.append(second.tag)
        host_log = "\n".join(lines)
        assert "wheel-views/" in host_log and "Downloading six" not in host_log, host_log[-2000:]
    finally:
        for tag in tags:
            _forget(docker_client, tag)
