"""The bytecode store (bridge/scoring/images/sets/bytecode.py, assets/compile_wheels.py): compiled
modules of cached wheels, copied into never-seen sets before their first score."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from docker.errors import ImageNotFound

from bridge.scoring.images.disk import WheelCache
from bridge.scoring.images.sets import bytecode, ensure_deps_image, wait_for_compiles
from bridge.scoring.images.sets import env_volume as env_mod
from tests import install_script_runner as script

_spec = importlib.util.spec_from_file_location("compile_wheels", bytecode.FILL_SCRIPT)
assert _spec is not None and _spec.loader is not None
compile_wheels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compile_wheels)

TAG = sys.implementation.cache_tag


def make_wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in files.items():
            zf.writestr(member, text)
        zf.writestr(f"{name}-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return path


def pyc_flags(path: Path) -> int:
    return int(struct.unpack("<I", path.read_bytes()[4:8])[0])


# ---------------------------------------------------------------- the fill's own script


def test_a_wheels_modules_become_hash_checked_bytecode_laid_out_as_installed(tmp_path):
    cache, store = tmp_path / "cache", tmp_path / "store"
    store.mkdir()
    wheel = make_wheel(
        cache,
        "demo_pkg",
        "1.0",
        {
            "demo_pkg/__init__.py": "VALUE = 1\n",
            "demo_pkg/sub/mod.py": "def f():\n    return 2\n",
            "demo_pkg-1.0.data/purelib/extra_mod.py": "X = 3\n",
            "demo_pkg/broken.py": "def (:\n",  # a file that does not compile is left without bytecode
            "demo_pkg/data.txt": "not python\n",
        },
    )
    assert compile_wheels.fill(store, cache, "demo_pkg-1.0", wheel.name) == "compiled"
    entry = store / "demo_pkg-1.0"
    found = sorted(p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file())
    assert found == [
        f"__pycache__/extra_mod.{TAG}.pyc",
        f"demo_pkg/__pycache__/__init__.{TAG}.pyc",
        f"demo_pkg/sub/__pycache__/mod.{TAG}.pyc",
    ]
    # PEP 552: hash-based (bit 0) and checked (bit 1) at every import
    assert all(pyc_flags(entry / rel) == 0b11 for rel in found)
    assert compile_wheels.fill(store, cache, "demo_pkg-1.0", wheel.name) == "present"
    assert not [p for p in store.iterdir() if p.name.startswith(".tmp-")]


def test_members_outside_site_packages_are_never_written(tmp_path):
    cache, store = tmp_path / "cache", tmp_path / "store"
    (tmp_path / "store").mkdir()
    wheel = make_wheel(
        cache,
        "sly",
        "2.0",
        {
            "../escape.py": "A = 1\n",
            "sly/../../escape2.py": "A = 1\n",
            "/abs_escape.py": "A = 1\n",
            "sly-2.0.data/scripts/tool.py": "A = 1\n",
            "sly-2.0.data/data/share.py": "A = 1\n",
            ".hidden/x.py": "A = 1\n",
            "sly/ok.py": "A = 1\n",
        },
    )
    assert compile_wheels.fill(store, cache, "sly-2.0", wheel.name) == "compiled"
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == [f"cache/{wheel.name}", f"store/sly-2.0/sly/__pycache__/ok.{TAG}.pyc"]
    # a wheel path that leaves the cache's folder is refused
    outside = make_wheel(tmp_path / "elsewhere", "far", "1.0", {"far.py": "A = 1\n"})
    assert compile_wheels.fill(store, cache, "far-1.0", f"../elsewhere/{outside.name}") == "no wheel"


def test_bytecode_is_used_only_beside_the_source_it_was_compiled_from(tmp_path):
    """What makes a copy safe: a checked file whose source hash differs is ignored (the module is
    compiled from its source), one whose hash matches is what runs."""
    cache, store, site = tmp_path / "cache", tmp_path / "store", tmp_path / "site"
    store.mkdir()
    wheel = make_wheel(cache, "probe_mod", "1.0", {"probe_mod.py": "VALUE = 'from the wheel'\n"})
    assert compile_wheels.fill(store, cache, "probe_mod-1.0", wheel.name) == "compiled"
    pyc = store / "probe_mod-1.0" / "__pycache__" / f"probe_mod.{TAG}.pyc"

    def value(source: str, body: bytes | None = None) -> str:
        (site / "__pycache__").mkdir(parents=True, exist_ok=True)
        (site / "probe_mod.py").write_text(source)
        data = pyc.read_bytes()
        if body is not None:
            data = data[:16] + body  # same header (the source's hash), another module body
        (site / "__pycache__" / pyc.name).write_bytes(data)
        out = subprocess.run(
            [sys.executable, "-c", "import probe_mod; print(probe_mod.VALUE)"],
            env={**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    import marshal

    other = marshal.dumps(compile("VALUE = 'from the bytecode'\n", "probe_mod.py", "exec"))
    assert value("VALUE = 'from the wheel'\n", other) == "from the bytecode"  # hash matches: used
    assert value("VALUE = 'installed'\n", other) == "installed"  # another source: never used


def test_the_store_follows_the_package_cache(tmp_path):
    store = tmp_path / "store"
    for name in ("kept-1.0", "gone-1.0", "young-1.0", ".tmp-old-1.0-ab", ".tmp-new-1.0-cd"):
        (store / name).mkdir(parents=True)
    old = time.time() - 2 * compile_wheels.SETTLE_SECONDS
    for name in ("kept-1.0", "gone-1.0", ".tmp-old-1.0-ab"):
        os.utime(store / name, (old, old))
    listing = tmp_path / "wheels.txt"
    listing.write_text("keep\tkept-1.0\t\n")
    assert compile_wheels.main(store, tmp_path / "cache", listing) == 0
    # an entry whose wheel left the cache goes once settled; one another fill just made stays
    assert sorted(p.name for p in store.iterdir()) == [".tmp-new-1.0-cd", "kept-1.0", "young-1.0"]


# ---------------------------------------------------------------- host side


def test_keys_of_wheels_and_missing_lines():
    assert bytecode.wheel_key("PyYAML-6.0.1-cp311-cp311-manylinux_2_17_x86_64.whl") == "pyyaml-6.0.1"
    assert bytecode.wheel_key("zope.interface-6.0-cp311-cp311-linux_x86_64.whl") == "zope_interface-6.0"
    assert bytecode.wheel_key("Foo_Bar-2.0rc1-1-py3-none-any.whl") == "foo_bar-2.0rc1"
    assert bytecode.wheel_key("not-a-wheel.tar.gz") is None
    log = "x\nRGBRIDGE_BYTECODE_MISSING six-1.16.0 ../etc-1 fastapi-0.115.14\nRGBRIDGE_BYTECODE_MISSING \n"
    assert bytecode.missing_keys(log) == ["fastapi-0.115.14", "six-1.16.0"]


def test_the_fill_list_names_one_cached_wheel_per_wanted_key(tmp_path):
    cache = WheelCache(root=tmp_path / "wheels")
    src = tmp_path / "src"
    for name, version in (("six", "1.16.0"), ("Flask", "3.0.0"), ("idna", "3.7")):
        cache.add(make_wheel(src, name, version, {f"{name.lower()}.py": "A = 1\n"}))
    listing, count = bytecode.fill_list(["six-1.16.0", "flask-3.0.0", "absent-1.0"], cache)
    rows = sorted(tuple(line.split("\t")) for line in listing.splitlines())
    assert count == 2
    assert [r[:2] for r in rows] == [("fill", "flask-3.0.0"), ("fill", "six-1.16.0"), ("keep", "idna-3.7")]
    for row in rows:
        if row[0] == "fill":
            assert (cache.root / row[2]).is_file()


def test_the_install_script_names_the_added_distributions_the_store_lacks_and_copies_the_rest(tmp_path):
    store, site = tmp_path / "store", tmp_path / "site"
    (site / "pip-24.0.dist-info").mkdir(parents=True)  # the base's: never looked up
    have = store / bytecode.key_of("Foo.Bar", "1.0") / "foo" / "__pycache__"
    have.mkdir(parents=True)
    (have / f"m.{TAG}.pyc").write_bytes(b"pyc")
    (site / "foo" / "__pycache__").mkdir(parents=True)
    (site / "foo" / "__pycache__" / f"kept.{TAG}.pyc").write_bytes(b"mine")
    (have / f"kept.{TAG}.pyc").write_bytes(b"store's")
    run = script.run(
        tmp_path,
        ["requirements.txt"],
        mode="index",
        ready_mark="RGBRIDGE_READY_x",
        compile_late=True,
        bytecode_dir=str(store),
        env={"STUB_SITE": str(site), "STUB_NEW_DISTS": "Foo.Bar-1.0.dist-info zope.interface-6.0RC1.dist-info"},
    )
    assert run.returncode == 0
    assert run.having("RGBRIDGE_BYTECODE_MISSING") == ["RGBRIDGE_BYTECODE_MISSING zope_interface-6.0rc1"]
    assert bytecode.key_of("zope.interface", "6.0RC1") == "zope_interface-6.0rc1"
    assert run.index("RGBRIDGE_BYTECODE_MISSING") < run.index("RGBRIDGE_READY_x")
    assert (site / "foo" / "__pycache__" / f"m.{TAG}.pyc").read_bytes() == b"pyc"
    assert (site / "foo" / "__pycache__" / f"kept.{TAG}.pyc").read_bytes() == b"mine"  # none overwritten
    assert not list(site.rglob("*.part"))
    # the store is only read
    assert sorted(p.name for p in store.iterdir()) == ["foo_bar-1.0"]


# ---------------------------------------------------------------- real engine


def _run(docker_client, image: str, command: list[str], volume: str, at: str, mode: str) -> str:
    """``command``'s output in a throwaway container of ``image`` with ``volume`` at ``at``."""
    out = docker_client.containers.run(
        image,
        command,
        volumes={volume: {"bind": at, "mode": mode}},
        network_mode="none",
        remove=True,
        labels={"rgbridge.owner": "rgbridge", "rgbridge.kind": "test"},
    )
    return out.decode() if isinstance(out, bytes) else str(out)


def _in_store(docker_client, base: str, script_text: str) -> str:
    return _run(
        docker_client, base, ["sh", "-c", script_text], bytecode.store_name(docker_client, base), "/store", "rw"
    )


@pytest.mark.docker
def test_a_never_seen_set_gets_the_stores_bytecode_of_its_cached_packages(docker_client, base_image, index_needed):
    made = []
    try:
        first = ensure_deps_image(
            docker_client, f"six==1.16.0\nsix>=0.0.{time.time_ns()}\n", env_volume=True, timeout=300
        )
        made.append(first)
        assert wait_for_compiles(300)  # the set's compile and the store's fill
        assert "present" in _in_store(docker_client, base_image, "test -d /store/six-1.16.0 && echo present")
        second = ensure_deps_image(
            docker_client,
            f"six==1.16.0\nsix>=0.0.{time.time_ns()}\n",
            env_volume=True,
            allow_pending_check=True,
            timeout=300,
        )
        made.append(second)
        assert "RGBRIDGE_BYTECODE_MISSING \n" in second.log_tail  # nothing lacking
        assert second.settle()
        assert wait_for_compiles(300)
        assert second.volume is not None
        out = _run(
            docker_client,
            base_image,
            [
                "python",
                "-c",
                "import importlib.util, struct, six; p = importlib.util.cache_from_source(six.__file__);"
                " print('flags', struct.unpack('<I', open(p, 'rb').read()[4:8])[0])",
            ],
            second.volume.name,
            "/opt/venv",
            "ro",
        )
        assert "flags 3" in out  # the store's hash-checked file, not a late compile's timestamped one
    finally:
        for deps in made:
            deps.settle()
            if deps.volume is not None:
                with contextlib.suppress(ImageNotFound):  # by name: the tag sits on the base image
                    docker_client.images.remove(deps.volume.name.replace(env_mod.VOLUME_PREFIX, "rgbridge-deps:", 1))
                env_mod.remove_volume(docker_client, deps.volume.name)


@pytest.mark.docker
def test_a_fill_compiles_a_wheel_without_running_it(docker_client, base_image, tmp_path, monkeypatch):
    cache_root = tmp_path / "wheels"
    monkeypatch.setenv("RGBRIDGE_WHEEL_CACHE", str(cache_root))
    planted = "open('/store/pwned', 'w').write('ran'); open('/tmp/pwned', 'w').write('ran')\n"
    wheel = make_wheel(
        tmp_path / "src",
        "rgbt_hostile",
        "1.0",
        {"rgbt_hostile/__init__.py": planted, "../../rgbt_escape.py": planted, "rgbt_hostile/sub.py": planted},
    )
    assert WheelCache(root=cache_root).add(wheel) is not None
    assert bytecode.store_mount(docker_client, base_image) is not None  # the store exists
    container = bytecode.start_fill(docker_client, base_image, ["rgbt_hostile-1.0"])
    assert container is not None
    try:
        assert container.wait(timeout=120)["StatusCode"] == 0
        log = container.logs().decode()
        assert "RGBRIDGE_BYTECODE rgbt_hostile-1.0 compiled" in log
        listing = _in_store(docker_client, base_image, "cd /store && find rgbt_hostile-1.0 -type f; ls; true")
        assert f"rgbt_hostile-1.0/rgbt_hostile/__pycache__/__init__.{TAG}.pyc" in listing
        assert "pwned" not in listing and "rgbt_escape" not in listing
        assert container.attrs["HostConfig"]["NetworkMode"] == "none"
    finally:
        container.remove(force=True)
        env_mod.remove_volume(docker_client, bytecode.store_name(docker_client, base_image))  # this cache's own
