"""Scoring images on the real engine: base (cached), tester, deps layers, failures."""

from __future__ import annotations

import time

import pytest

from bridge.errors import ScoringError
from bridge.scoring.images.base import (
    OFFICIAL_PYTHON,
    TESTER_PINS,
    DependencyInstallError,
    base_image_tag,
    base_recipe_hash,
    build_all,
    build_rootfs,
    debian_source,
    docker_build,
    ensure_base_image,
    ensure_tester_image,
    host,
    host_extra_cas,
    host_pip_index_settings,
    image_exists,
    index_reachable_from_containers,
    official_python_image,
    prepare_wheelhouse,
    remove_tree,
    rootfs,
)
from bridge.scoring.images.disk import list_images
from bridge.scoring.images.sets import DepsImage, deps_image_tag, ensure_deps_image
from bridge.scoring.sandbox.containers import create_container, managed, read_logs, wait_with_timeout
from bridge.scoring.sandbox.docker_client import LABEL_KIND, LABEL_OWNER, make_labels
from bridge.scoring.sandbox.protocol import SandboxLimits


def _run(client, image: str, script: str, *, seconds: float = 60) -> tuple[int | None, str]:
    c = create_container(
        client,
        image,
        name=f"rgbridge-test-img-{time.monotonic_ns()}",
        command=["sh", "-c", script],
        labels=make_labels(kind="test"),
        limits=SandboxLimits(),
    )
    with managed(c):
        c.start()
        outcome = wait_with_timeout(c, seconds)
        return outcome.exit_code, read_logs(c)


def _forget(client, tag: str) -> None:
    if image_exists(client, tag):
        client.images.remove(tag, force=True)


@pytest.fixture(scope="session")
def tester_image(docker_client, base_image) -> str:
    return ensure_tester_image(docker_client)


# ---------------------------------------------------------------- pure helpers (no engine)


def test_build_all_fetches_tester_wheels_while_the_base_builds(monkeypatch, tmp_path):
    """Issue 41: the tester's downloads overlap the base image's build, and the tester image then
    installs from those wheels. The base build here waits until the download has started."""
    import threading

    from bridge.scoring.images.base import tester

    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path))
    fetching = threading.Event()
    calls: list[tuple[str, object]] = []

    def fake_prepare(requirements, dest, **kwargs):
        fetching.set()
        calls.append(("prepare", requirements))
        dest.mkdir(parents=True)
        return dest

    def fake_base(client, *, progress=None, force=False):
        assert fetching.wait(10), "the tester wheels were not being fetched during the base build"
        return base_image_tag()

    def fake_tester(client, *, wheelhouse=None, progress=None, timeout=900):
        calls.append(("tester", wheelhouse))
        return "rgbridge-tester:x"

    monkeypatch.setattr(tester, "image_exists", lambda client, tag: False)
    monkeypatch.setattr(tester, "prepare_wheelhouse", fake_prepare)
    monkeypatch.setattr(tester, "ensure_base_image", fake_base)
    monkeypatch.setattr(tester, "ensure_tester_image", fake_tester)
    lines: list[str] = []
    out = build_all(object(), progress=lines.append)  # type: ignore[arg-type]
    assert out["tester"] == "rgbridge-tester:x"
    assert calls[0] == ("prepare", "\n".join(TESTER_PINS) + "\n")
    assert calls[1][0] == "tester" and str(calls[1][1]).startswith(str(tmp_path / "wheelhouse"))
    assert any("fetched on the host" in line for line in lines) and any("base image ready" in line for line in lines)

    # a failed download is not an error: the tester build finds its packages as before
    def failing_prepare(requirements, dest, **kwargs):
        fetching.set()
        raise DependencyInstallError("pip download (binary wheels only) failed")

    calls.clear()
    monkeypatch.setattr(tester, "prepare_wheelhouse", failing_prepare)
    build_all(object(), progress=lines.append)  # type: ignore[arg-type]
    assert calls == [("tester", None)]


def test_image_salt_gives_every_image_tags_of_its_own(monkeypatch):
    monkeypatch.delenv("RGBRIDGE_IMAGE_SALT", raising=False)
    plain = base_recipe_hash()
    monkeypatch.setenv("RGBRIDGE_IMAGE_SALT", "bench-1")
    salted = base_recipe_hash()
    assert salted != plain and base_image_tag().endswith(salted)
    monkeypatch.setenv("RGBRIDGE_IMAGE_SALT", "")
    assert base_recipe_hash() == plain  # unset or empty: the tags of every release


def test_debian_source_env_override(monkeypatch):
    monkeypatch.setenv("RGBRIDGE_DEBIAN_MIRROR", "http://mirror.invalid/debian/")
    assert debian_source() == ("http://mirror.invalid/debian", "bookworm")


def test_debian_source_reads_host_apt_sources(monkeypatch):
    monkeypatch.delenv("RGBRIDGE_DEBIAN_MIRROR", raising=False)
    entries = host._parse_apt_sources()
    if not any("bookworm" in suites for _, suites in entries):
        pytest.skip("host apt sources do not name bookworm")
    mirror, suite = debian_source()
    assert suite == "bookworm"
    assert mirror in {uri.rstrip("/") for uri, suites in entries if "bookworm" in suites}


def test_recipe_hash_covers_host_cas(monkeypatch, tmp_path):
    monkeypatch.setenv("RGBRIDGE_DEBIAN_MIRROR", "http://mirror.invalid/debian")
    monkeypatch.setenv("RGBRIDGE_EXTRA_CA_DIR", str(tmp_path))
    empty = base_recipe_hash()
    (tmp_path / "corp.crt").write_text("-----BEGIN CERTIFICATE-----\nx\n")
    with_ca = base_recipe_hash()
    assert empty != with_ca
    assert [n for n, _ in host_extra_cas()] == ["corp.crt"]


def test_deps_tag_depends_on_inputs():
    a = deps_image_tag("b:1", "six==1.16.0\n")
    assert a == deps_image_tag("b:1", "six==1.16.0\r\n\n")  # line endings normalised
    assert a != deps_image_tag("b:2", "six==1.16.0\n")
    assert a != deps_image_tag("b:1", "six==1.16.0\n", ["pytest"])
    assert a.startswith("rgbridge-deps:") and len(a.split(":")[1]) == 12


def test_missing_debootstrap_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path))
    monkeypatch.setattr(rootfs.shutil, "which", lambda name: None)
    monkeypatch.setattr(rootfs.os, "geteuid", lambda: 0)
    with pytest.raises(ScoringError, match="apt-get install -y debootstrap"):
        build_rootfs(tmp_path / "x.tar", None)


def test_non_root_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(rootfs.os, "geteuid", lambda: 1000)
    with pytest.raises(ScoringError, match="needs root"):
        build_rootfs(tmp_path / "x.tar", None)


# ---------------------------------------------------------------- engine


@pytest.mark.docker
def test_base_image_is_cached_and_fast(docker_client, base_image):
    started = time.monotonic()
    assert ensure_base_image(docker_client) == base_image
    assert time.monotonic() - started < 1.0
    img = docker_client.images.get(base_image)
    assert img.labels[LABEL_OWNER] == "rgbridge" and img.labels[LABEL_KIND] == "base"
    assert base_image == base_image_tag()


@pytest.mark.docker
def test_base_image_contents(docker_client, base_image):
    code, out = _run(
        docker_client,
        base_image,
        "id -u; id -g; command -v python; command -v timeout; command -v nc; "
        "command -v curl; stat -c '%u %n' /repo /tests /results; echo $LANG; "
        "python -c 'import sys; print(sys.prefix)'",
    )
    assert code == 0, out
    lines = out.split()
    assert lines[:2] == ["10001", "10001"]
    assert "/opt/venv/bin/python" in out and "/usr/bin/timeout" in out
    assert "10001 /repo" in out and "10001 /results" in out
    assert "C.UTF-8" in out and out.strip().endswith("/opt/venv")


@pytest.mark.docker
def test_base_image_trusts_host_cas(docker_client, base_image):
    cas = host_extra_cas()
    if not cas:
        pytest.skip("the host has no extra CA certificates")
    code, out = _run(
        docker_client,
        base_image,
        "ls /usr/local/share/ca-certificates/rgbridge-host/; "
        "grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt",
    )
    assert code == 0, out
    for name, _ in cas:
        assert name in out


@pytest.mark.docker
def test_tester_image_has_pinned_tools(docker_client, tester_image):
    code, out = _run(
        docker_client,
        tester_image,
        "command -v python; pytest --version; "
        "python -c 'import requests, httpx, pytest_timeout; print(requests.__version__)'",
    )
    assert code == 0, out
    assert out.splitlines()[0] == "/opt/tester/bin/python"
    pins = dict(p.split("==") for p in TESTER_PINS)
    assert f"pytest {pins['pytest']}" in out and pins["requests"] in out
    assert ensure_tester_image(docker_client) == tester_image


@pytest.mark.docker
def test_deps_image_installs_and_is_cached(docker_client, base_image):
    req = "six==1.16.0\n"
    _forget(docker_client, deps_image_tag(base_image, req))  # exercise a real build
    first = ensure_deps_image(docker_client, req, timeout=300)
    assert first.tag == deps_image_tag(base_image, req) and not first.cached
    code, out = _run(docker_client, first.tag, "python -c 'import six; print(six.__version__)'")
    assert code == 0 and "1.16.0" in out, out
    again = ensure_deps_image(docker_client, req)
    assert again.tag == first.tag and again.cached and again.seconds < 1.0


@pytest.mark.docker
def test_blank_requirements_return_base(docker_client, base_image):
    res = ensure_deps_image(docker_client, " \n\n")
    assert res.tag == base_image and res.cached


@pytest.mark.docker
def test_bad_requirement_raises_with_pip_output(docker_client, base_image):
    with pytest.raises(DependencyInstallError) as info:
        ensure_deps_image(docker_client, "this-package-does-not-exist-rgbridge==0.0.1\n", timeout=300)
    err = info.value
    assert "this-package-does-not-exist-rgbridge" in err.log_tail
    assert "No matching distribution" in err.log_tail or "Could not find" in err.log_tail
    assert not err.timed_out
    assert "\n" not in str(err)
    tag = deps_image_tag(base_image, "this-package-does-not-exist-rgbridge==0.0.1\n")
    assert not image_exists(docker_client, tag)


@pytest.mark.docker
def test_deps_build_wall_clock_timeout(docker_client, base_image, tmp_path):
    # A requirement file that makes pip wait: a find-links dir with a package whose build
    # never finishes is complex; a RUN sleep via docker_build exercises the same kill path.
    started = time.monotonic()
    res = docker_build(
        docker_client,
        dockerfile_body="RUN sleep 120\n",
        base=base_image,
        tag="rgbridge-deps:timeout-test",
        kind="deps",
        timeout=5,
    )
    assert res.timed_out and not res.ok
    assert time.monotonic() - started < 60
    assert not image_exists(docker_client, "rgbridge-deps:timeout-test")


@pytest.mark.docker
def test_deps_from_explicit_wheelhouse(docker_client, base_image, tmp_path):
    wheels = prepare_wheelhouse("six==1.16.0\n", tmp_path / "wh")
    assert any(p.name.startswith("six-1.16.0") for p in wheels.iterdir())
    _forget(docker_client, deps_image_tag(base_image, "six==1.16.0\n", (), wheels))
    res = ensure_deps_image(docker_client, "six==1.16.0\n", wheelhouse=wheels, timeout=300)
    assert res.tag != deps_image_tag(base_image, "six==1.16.0\n")  # mode is hashed
    code, out = _run(docker_client, res.tag, "python -c 'import six; print(six.__version__)'")
    assert code == 0 and "1.16.0" in out, out


@pytest.mark.docker
def test_index_probe_is_cached(docker_client, base_image):
    first = index_reachable_from_containers(docker_client)
    started = time.monotonic()
    assert index_reachable_from_containers(docker_client) is first
    assert time.monotonic() - started < 0.5


@pytest.mark.docker
def test_list_images_shows_ours(docker_client, base_image, tester_image):
    tags = {i.tag: i.kind for i in list_images(docker_client)}
    assert tags[base_image] == "base" and tags[tester_image] == "tester"


@pytest.mark.docker
def test_official_python_image_never_blocks(docker_client):
    started = time.monotonic()
    ref = official_python_image(docker_client, pull_timeout=10)
    assert ref is None or ref == OFFICIAL_PYTHON
    assert time.monotonic() - started < 30
    started = time.monotonic()
    assert official_python_image(docker_client) == ref  # cached answer
    assert time.monotonic() - started < 1.0


@pytest.mark.docker
def test_concurrent_deps_requests_build_once(docker_client, base_image):
    import threading

    req = f"six==1.16.0\nsix>=0.0.{time.time_ns()}\n"  # a new hash: forces one real build
    results: list[DepsImage] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(ensure_deps_image(docker_client, req, timeout=300))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    try:
        assert not errors and len(results) == 2
        assert results[0].tag == results[1].tag
        assert sorted(r.cached for r in results) == [False, True]
    finally:
        _forget(docker_client, deps_image_tag(base_image, req))


@pytest.mark.docker
def test_build_all_reports_tags(docker_client, base_image, tester_image):
    lines: list[str] = []
    out = build_all(docker_client, progress=lines.append)
    assert out["base"] == base_image and out["tester"] == tester_image
    assert out["timings"]["base"] < 1.0


@pytest.mark.docker
def test_auto_mode_falls_back_to_host_wheelhouse(docker_client, base_image, monkeypatch, tmp_path):
    monkeypatch.setenv("RGBRIDGE_INDEX_FROM_CONTAINERS", "0")  # as if builds had no index
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path))
    monkeypatch.delenv("RGBRIDGE_WHEEL_CACHE", raising=False)
    req = f"six==1.16.0\nsix>=0.0.{time.time_ns()}\n"
    lines: list[str] = []
    try:
        res = ensure_deps_image(docker_client, req, timeout=300, progress=lines.append)
        assert not res.cached
        assert any("downloading binary wheels on the host" in x for x in lines)
        assert list((tmp_path / "wheels").glob("*/six-1.16.0*.whl"))  # entered the cache
        assert "Looking in links" in res.log_tail and "Downloading" not in res.log_tail
        code, out = _run(docker_client, res.tag, "python -c 'import six; print(six.__version__)'")
        assert code == 0 and "1.16.0" in out
    finally:
        _forget(docker_client, deps_image_tag(base_image, req))


def test_host_pip_index_settings_env_wins(monkeypatch):
    monkeypatch.setattr(host, "_pip_settings", None)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_TRUSTED_HOST", "127.0.0.1")
    try:
        got = host_pip_index_settings()
        assert got["PIP_INDEX_URL"] == "http://127.0.0.1:9/simple"
        assert got["PIP_TRUSTED_HOST"] == "127.0.0.1"
        assert "PIP_FIND_LINKS" not in got and "PIP_CERT" not in got  # host-only settings
    finally:
        host._pip_settings = None


def test_prepare_wheelhouse_failure_carries_pip_output(tmp_path):
    with pytest.raises(DependencyInstallError) as info:
        prepare_wheelhouse("this-package-does-not-exist-rgbridge==0.0.1\n", tmp_path / "wh", timeout=120)
    assert "this-package-does-not-exist-rgbridge" in info.value.log_tail


def test_remove_tree_deletes_plain_work_dir(tmp_path):
    work = tmp_path / "rootfs-x"
    (work / "root" / "etc").mkdir(parents=True)
    (work / "root" / "etc" / "f").write_text("x")
    remove_tree(work)
    assert not work.exists()
