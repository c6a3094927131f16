"""What a score of a never-seen dependency set no longer waits for (issue 41, docs/measurements.md):
the host's pip settings read ahead, once, and the interpreter's exit without a collection over
every object."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bridge import cli
from bridge.scoring.images.base import host
from bridge.scoring.images.disk import WheelCache, pkgcache
from bridge.scoring.images.sets import DepSet, deps


@pytest.fixture
def counted_pip_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[float]:
    """`pip config list` replaced by a slow stand-in that counts its calls; a cache folder of
    the test's own (where the settings read are remembered)."""
    calls: list[float] = []
    real_run = subprocess.run

    def fake_run(cmd: Any, *args: Any, **kwargs: Any) -> Any:
        if list(cmd[-3:]) == ["pip", "config", "list"]:
            calls.append(time.monotonic())
            time.sleep(0.3)
            return subprocess.CompletedProcess(cmd, 0, stdout="global.index-url='http://127.0.0.1:9/simple'\n")
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(host, "_pip_settings", None)
    monkeypatch.setattr(host.subprocess, "run", fake_run)
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path / "cache"))
    return calls


def test_a_later_process_takes_the_settings_read_before_until_pips_configuration_changes(
    counted_pip_config: list[float], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A scoring process starts no `pip config list` when an earlier one read the same
    configuration (its files and PIP_ settings unchanged) less than an hour ago."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = http://127.0.0.1:9/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    first = host.host_pip_index_settings()
    assert len(counted_pip_config) == 1
    monkeypatch.setattr(host, "_pip_settings", None)  # a new process
    assert host.host_pip_index_settings() == first and len(counted_pip_config) == 1
    for change in (
        lambda: conf.write_text("[global]\nindex-url = http://127.0.0.1:8/simple\n"),  # the file
        lambda: monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "5"),  # the environment
        lambda: monkeypatch.setattr(host, "REMEMBER_SECONDS", 0.0),  # an hour later
    ):
        calls = len(counted_pip_config)
        change()
        monkeypatch.setattr(host, "_pip_settings", None)
        host.host_pip_index_settings()
        assert len(counted_pip_config) == calls + 1
    # `rgbridge doctor`'s fresh read never takes them from the file
    monkeypatch.setattr(host, "REMEMBER_SECONDS", 3600.0)
    calls = len(counted_pip_config)
    host.host_pip_index_settings(fresh=True)
    assert len(counted_pip_config) == calls + 1


def test_an_index_address_with_credentials_is_never_written_down(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(host, "_pip_settings", None)
    monkeypatch.setenv("PIP_INDEX_URL", "https://user:s3cret@127.0.0.1:9/simple")
    assert host.host_pip_index_settings()["PIP_INDEX_URL"].startswith("https://user:s3cret@")
    assert "s3cret" not in "".join(p.read_text() for p in (tmp_path / "cache").rglob("*") if p.is_file())
    monkeypatch.setattr(host, "_pip_settings", None)


def test_a_build_during_the_read_ahead_waits_for_it_instead_of_reading_again(counted_pip_config: list[float]) -> None:
    host.read_pip_index_settings_ahead()
    time.sleep(0.05)  # the read is under way
    started = time.monotonic()
    got = host.host_pip_index_settings()
    assert got == {"PIP_INDEX_URL": "http://127.0.0.1:9/simple"}
    assert len(counted_pip_config) == 1
    assert time.monotonic() - started < 0.3  # it waited for the read already under way
    host.read_pip_index_settings_ahead()  # already read: nothing more
    assert host.host_pip_index_settings() == got and len(counted_pip_config) == 1


def test_settings_read_at_once_by_several_builds_are_read_once(counted_pip_config: list[float]) -> None:
    results: list[dict[str, str]] = []
    threads = [threading.Thread(target=lambda: results.append(host.host_pip_index_settings())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(counted_pip_config) == 1 and len(results) == 4 and all(r == results[0] for r in results)
    # `fresh` reads again, for `rgbridge doctor`, without changing what builds use
    assert host.host_pip_index_settings(fresh=True) == results[0] and len(counted_pip_config) == 2


def test_the_program_freezes_its_objects_before_the_interpreter_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    froze: list[bool] = []
    monkeypatch.setattr(cli, "main", lambda argv=None: 3)
    monkeypatch.setattr(cli.gc, "freeze", lambda: froze.append(True))
    with pytest.raises(SystemExit) as info:
        cli.entry()
    assert info.value.code == 3 and froze == [True]


def test_the_installed_program_is_the_entry_that_freezes() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["scripts"]["rgbridge"] == "bridge.cli:entry"
    out = subprocess.run([sys.executable, "-m", "bridge.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("rgbridge ")


def _wheel(folder: Path, name: str, payload: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(payload)
    return folder / name


def test_a_wheel_evicted_while_a_view_is_made_is_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = WheelCache(tmp_path / "wheels", max_bytes=0)
    kept = cache.add(_wheel(tmp_path / "src", "keep-1.0-py3-none-any.whl", b"k" * 100))
    gone = cache.add(_wheel(tmp_path / "src", "gone-1.0-py3-none-any.whl", b"g" * 100))
    assert kept is not None and gone is not None
    real_link = pkgcache.os.link

    def link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(src) == gone.path:  # another build's trim removes it between the listing and the link
            shutil.rmtree(gone.path.parent)
            raise FileNotFoundError(src)
        real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(pkgcache.os, "link", link)
    with cache.view() as view:
        assert sorted(p.name for p in (view / "flat").iterdir()) == ["keep-1.0-py3-none-any.whl"]


def test_the_view_is_removed_and_the_cache_trimmed_off_the_builds_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RGBRIDGE_WHEEL_CACHE", str(tmp_path / "cache" / "wheels"))
    cache = WheelCache()
    for i in range(3):
        cache.add(_wheel(tmp_path / "src", f"p{i}-1.0-py3-none-any.whl", bytes([i]) * 100))
    trimmed = threading.Event()
    slow = threading.Event()

    def evict(self: WheelCache) -> list[Path]:
        slow.wait(5)  # a large cache takes its time
        trimmed.set()
        return []

    monkeypatch.setattr(WheelCache, "evict", evict)
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    want = DepSet(base="base", tag="rgbridge-deps:x", files={"requirements.txt": "p0\n"}, scope="s")
    started = time.monotonic()
    with deps._source(None, want, [], wheelhouse, None, 60, None) as source:  # type: ignore[arg-type]
        view = source.view
        assert (view / "flat" / "p0-1.0-py3-none-any.whl").is_file()
    assert time.monotonic() - started < 2.5  # the build's caller did not wait for the trim
    assert not trimmed.is_set()
    slow.set()
    assert trimmed.wait(5)
    deadline = time.monotonic() + 5
    while view.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not view.exists()


def test_the_uv_binary_is_hashed_again_only_when_it_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    from bridge.errors import ScoringError
    from bridge.scoring.images import disk
    from bridge.scoring.images.base import wheelhouse

    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path))
    monkeypatch.delenv("RGBRIDGE_INSTALLER", raising=False)
    monkeypatch.setattr(wheelhouse, "_uv_verified", set())
    monkeypatch.setattr(wheelhouse, "_uv_unavailable", False)
    folder = tmp_path / "tools" / f"uv-{wheelhouse.UV_VERSION}"
    folder.mkdir(parents=True)
    (folder / "uv").write_bytes(b"uv-binary")
    (folder / "uv.sha256").write_text(hashlib.sha256(b"uv-binary").hexdigest())
    hashed: list[Path] = []
    real = disk.sha256_file
    monkeypatch.setattr(disk, "sha256_file", lambda p: hashed.append(p) or real(p))

    def no_download(*args: Any, **kwargs: Any) -> None:
        raise ScoringError("no index here")

    monkeypatch.setattr(wheelhouse, "run_command", no_download)
    assert wheelhouse.uv_tool() == folder and len(hashed) == 1
    monkeypatch.setattr(wheelhouse, "_uv_verified", set())  # a new process
    assert wheelhouse.uv_tool() == folder and len(hashed) == 1  # unchanged since: not hashed again
    (folder / "uv").write_bytes(b"uv-tampered")  # changed: hashed again, and refused
    monkeypatch.setattr(wheelhouse, "_uv_verified", set())
    assert wheelhouse.uv_tool() is None and len(hashed) >= 2
