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

    def fake_base(client, *, progress=None, force=False, beside=None):
        assert fetching.wait(10), "the tester wheels were not being fetched during the base build"
        return base_image_tag()

    def fake_tester(client, *, wheelhouse=None, progress=None, timeout=900):
        calls.append(("tester", wheelhouse))
        return "rgbridge-tester:x"

    monkeypatch.setattr(tester, "image_exists", lambda client, tag: False)
    monkeypatch.setattr(tester, "prepare_wheelhouse", fake_prepare)
    monkeypatch.setattr(tester, "ensure_base_image", fake_base)
    monkeypatch.setattr(tester, "ensure_tester_image", fake_tester)
    monkeypatch.setattr(tester, "uv_tool", lambda: tmp_path)
    monkeypatch.setattr(tester, "index_reachable_from_containers", lambda client, base: True)
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


def test_build_all_readies_uv_and_the_index_probe_for_the_first_score(monkeypatch, tmp_path):
    """Issue 41: the demo's first score waited for the uv download and the index probe's
    container; `images build` now does both (the probe once the base exists)."""
    from bridge.scoring.images.base import tester

    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path))
    done: list[str] = []
    monkeypatch.setattr(tester, "image_exists", lambda client, tag: True)  # nothing to build
    monkeypatch.setattr(tester, "ensure_base_image", lambda client, **kw: "rgbridge-base:b")
    monkeypatch.setattr(tester, "ensure_tester_image", lambda client, **kw: "rgbridge-tester:t")
    monkeypatch.setattr(tester, "uv_tool", lambda: done.append("uv") or tmp_path)

    def probe(client, base):
        done.append(f"probe {base}")
        return True

    monkeypatch.setattr(tester, "index_reachable_from_containers", probe)
    lines: list[str] = []
    build_all(object(), progress=lines.append)  # type: ignore[arg-type]
    assert sorted(done) == ["probe rgbridge-base:b", "uv"]
    assert any("reach the package index" in line for line in lines) and any("uv ready" in line for line in lines)


def test_base_rootfs_leaves_out_what_was_made_beside_it(monkeypatch, tmp_path):
    """The work beside the base's last steps (the tester venv) writes in the same root, and the
    base's tarball must not carry it; dpkg's unsafe-io setting is gone before anything else."""
    import tarfile
    import threading

    from bridge.scoring.images.base import Beside

    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(rootfs.os, "geteuid", lambda: 0)
    monkeypatch.setattr(rootfs.shutil, "which", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(rootfs, "debian_source", lambda: ("http://mirror.invalid/debian", "bookworm"))
    monkeypatch.setattr(rootfs, "host_extra_cas", lambda: [])
    monkeypatch.setattr(rootfs, "chroot", lambda root, *args, progress=None: None)
    monkeypatch.setattr(rootfs.os, "chown", lambda path, uid, gid: None)
    unsafe_seen: list[bool] = []

    def fake_debootstrap(root, suite, mirror, progress):
        (root / "etc/dpkg/dpkg.cfg.d").mkdir(parents=True)
        (root / "opt").mkdir()
        (root / "usr/bin").mkdir(parents=True)
        (root / "usr/bin/python3").write_text("")

    monkeypatch.setattr(rootfs, "_debootstrap", fake_debootstrap)
    started = threading.Event()

    def beside(root):
        started.set()
        unsafe_seen.append((root / "etc/dpkg/dpkg.cfg.d/rgbridge-unsafe-io").exists())
        # its folders exist before it starts: no folder the base's tarball holds changes meanwhile
        assert (root / "opt/tester").is_dir() and (root / "opt/.rgbridge-tester-build").is_dir()
        (root / "opt/tester/bin").mkdir()
        (root / "opt/tester/bin/python").write_text("tester")

    dest = tmp_path / "base.tar"
    rootfs.build_rootfs(dest, None, beside=Beside(folders=("/opt/tester", "/opt/.rgbridge-tester-build"), run=beside))
    assert started.is_set() and unsafe_seen == [False]
    with tarfile.open(dest) as tar:
        names = tar.getnames()
    assert "./usr/bin/python3" in names and "./opt" in names
    assert not [n for n in names if n.startswith(("./opt/tester", "./opt/.rgbridge"))], names

    # work beside that fails is a line of progress, not the base's failure
    def failing(root):
        raise ScoringError("no wheels")

    lines: list[str] = []
    rootfs.build_rootfs(dest, lines.append, beside=Beside(folders=("/opt/tester",), run=failing))
    assert dest.is_file() and any("no wheels" in line for line in lines)


def test_debootstrap_installs_without_fsync_and_removes_the_setting(monkeypatch, tmp_path):
    """The two stages: the unpack, then the install in the chroot with dpkg's force-unsafe-io,
    and the setting file removed afterwards (the packages and files are those of one stage)."""
    calls: list[tuple[list[str], bool]] = []
    root = tmp_path / "root"
    unsafe = root / "etc/dpkg/dpkg.cfg.d/rgbridge-unsafe-io"

    def fake_run(cmd, **kwargs):
        if "--foreign" in cmd:
            root.mkdir()
        calls.append((list(cmd), unsafe.is_file() and unsafe.read_text().strip() == "force-unsafe-io"))
        return ""

    monkeypatch.setattr(rootfs, "run_command", fake_run)
    rootfs._debootstrap(root, "bookworm", "http://mirror.invalid/debian", None)
    (first, unsafe_then), (second, unsafe_later) = calls
    assert first[0] == "debootstrap" and "--foreign" in first and "--variant=minbase" in first and not unsafe_then
    assert second == ["chroot", str(root), "/debootstrap/debootstrap", "--second-stage"] and unsafe_later
    assert not unsafe.exists()


def test_layer_image_config_replaces_named_variables():
    from bridge.scoring.images.base import build

    attrs = {
        "Config": {
            "Env": ["PATH=/opt/venv/bin:/usr/bin", "LANG=C.UTF-8", "VIRTUAL_ENV=/opt/venv"],
            "Labels": {"a": "1"},
        },
        "RootFS": {"Layers": ["sha256:base"]},
    }
    import json

    body = json.loads(
        build._image_config(
            attrs, "sha256:new", {"b": "2"}, "c", {"PATH": "/opt/tester/bin:/usr/bin", "VIRTUAL_ENV": "/opt/tester"}
        )
    )
    assert body["config"]["Env"] == ["LANG=C.UTF-8", "PATH=/opt/tester/bin:/usr/bin", "VIRTUAL_ENV=/opt/tester"]
    assert body["config"]["Labels"] == {"a": "1", "b": "2"}
    assert body["rootfs"]["diff_ids"] == ["sha256:base", "sha256:new"]
    assert attrs["Config"]["Env"][0].startswith("PATH=/opt/venv")  # the base's config is not touched


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


@pytest.mark.docker
def test_tester_layer_made_beside_the_base_equals_the_built_tester(docker_client, base_image, tester_image, tmp_path):
    """Issue 41: the tester venv installed in the base's root (as ``build_all`` does while it
    makes the base) and loaded as one layer gives the tester image the legacy build gives: the
    same interpreter first on PATH, the same distributions, strict's plugin, the base below."""
    import secrets
    import tarfile
    from concurrent.futures import Future

    from bridge.scoring.images.base import tester

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "root"
    root.mkdir()
    holder = docker_client.containers.create(base_image, command=["true"], labels=make_labels(kind="test"))
    try:
        with tarfile.open(fileobj=_Stream(holder.export()), mode="r|") as tar:
            tar.extractall(root, numeric_owner=True, filter="fully_trusted")  # our own base image
    finally:
        holder.remove(force=True)
    wheels: Future = Future()
    wheels.set_result(prepare_wheelhouse("\n".join(TESTER_PINS) + "\n", tmp_path / "wheels", timeout=300))
    tag = f"rgbridge-tester:test-{secrets.token_hex(4)}"
    lines: list[str] = []
    try:
        beside = tester._tester_beside(tag, wheels, lines.append)
        beside.run(root)
        layer = tester._layer_path(tag)
        with tarfile.open(layer) as tar:
            names = tar.getnames()
        assert names[0] == "opt" and all(n == "opt" or n.startswith("opt/tester") for n in names), names[:5]
        assert tester._load_tester_layer(docker_client, base_image, tag, lines.append) == tag
        assert not layer.exists()  # loaded once, then gone
        script = (
            "command -v python; echo $VIRTUAL_ENV; python -m pip freeze --all; python -c 'import rgbridge_pytest_report'; "
            "ls /opt/tester/lib/python3*/site-packages/pytest/__pycache__ | grep -c pyc"
        )
        made = _run(docker_client, tag, script)
        built = _run(docker_client, tester_image, script)
        assert made[0] == 0 and built[0] == 0, (made, built)
        assert made[1].splitlines()[:2] == ["/opt/tester/bin/python", "/opt/tester"]
        assert sorted(made[1].splitlines()) == sorted(built[1].splitlines())
        img = docker_client.images.get(tag)
        assert img.labels[LABEL_KIND] == "tester" and img.labels["rgbridge.recipe"]
        base_layers = docker_client.images.get(base_image).attrs["RootFS"]["Layers"]
        assert img.attrs["RootFS"]["Layers"][: len(base_layers)] == base_layers
    finally:
        monkeypatch.undo()
        _forget(docker_client, tag)


class _Stream:
    """A file-like reader over the chunks of ``container.export()``."""

    def __init__(self, chunks) -> None:
        self._chunks, self._buf = iter(chunks), b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buf) < size:
            try:
                self._buf += next(self._chunks)
            except StopIteration:
                break
        if size < 0:
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:size], self._buf[size:]
        return out
