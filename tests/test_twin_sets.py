"""Twin sets (issue 41): compat's build makes strict's set from its environment after its first
file (bridge/scoring/images/sets/twin.py), so a never-seen set with both profiles costs one
build, not two. The twin must be exactly what its own build makes, get its own pip check and
bytecode, and fall back to its own build whenever it is not certain.

The script tests run the install script on the host with stand-ins (tests/install_script_runner.py);
the engine tests use the real engine and the package index (skipped where containers cannot
reach it)."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from pathlib import Path

import docker
import pytest

from bridge.scoring.images.base import build_lock, image_exists, try_build_lock, volume_exists
from bridge.scoring.images.sets import (
    DepSet,
    DepsImage,
    buildbox,
    deps_image_tag,
    ensure_deps_image,
    remove_volume,
    wait_for_compiles,
)
from bridge.scoring.images.sets import twin as twin_mod
from tests import install_script_runner

EnvVolume = twin_mod.EnvVolume

READY = "RGBRIDGE_READY_0123456789abcdef"
TWIN = buildbox.twin_mark(READY)

_TWIN_PYTHON = r"""#!/bin/bash
echo "TWIN python $*" >> "$TRACE"
case "$*" in
  *"pip install --dry-run"*)
    args=("$@")
    for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[$i]}" = --report ] && out="${args[$((i + 1))]}"; done
    printf '{"install": %s}' "${STUB_TWIN_INSTALL:-[]}" > "$out"
    exit 0 ;;
esac
exit 0
"""


def _twin_run(tmp_path: Path, *, mode: str = "index", env: dict[str, str] | None = None) -> tuple[Path, object]:
    """The script over two files, the twin after the first: requirements.txt adds a-1, extras.txt b-2."""
    prefix = tmp_path / "env"
    site = prefix / "lib" / "site-packages"
    site.mkdir(parents=True)
    (prefix / "bin").mkdir()
    (prefix / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (prefix / "bin" / "python").write_text(_TWIN_PYTHON)
    (prefix / "bin" / "python").chmod(0o755)
    twin = tmp_path / "twin"
    twin.mkdir()
    run = install_script_runner.run(
        tmp_path,
        ["requirements.txt", "extras.txt"],
        mode=mode,
        ready_mark=READY,
        compile_late=True,
        twin_dir=str(twin),
        twin_after=1,
        env={
            "STUB_SITE": str(site),
            "STUB_DISTS_requirements_txt": "a-1.dist-info",
            "STUB_DISTS_extras_txt": "b-2.dist-info",
            **(env or {}),
        },
    )
    return twin, run


def test_the_twin_is_the_environment_after_the_first_file_with_its_own_check_and_bytecode(tmp_path):
    twin, run = _twin_run(tmp_path)
    assert run.returncode == 0, run.lines
    # what the first file left, without uv's cache and lock: not the second file's
    assert (twin / "lib/site-packages/a-1.dist-info").is_dir()
    assert not (twin / "lib/site-packages/b-2.dist-info").exists()
    assert not (twin / ".rgbridge-uv-cache").exists() and not (twin / ".lock").exists()
    assert (twin / "pyvenv.cfg").is_file() and (twin / "bin/python").is_file()
    uv_calls = [i for i, line in enumerate(run.lines) if line.startswith("STUB uv pip install")]
    assert len(uv_calls) == 2 and uv_calls[0] < run.index(TWIN) < uv_calls[1] < run.index(READY)
    # its own pip check: its environment's pip over its own file only
    (check,) = run.having("TWIN python -m pip install --dry-run")
    assert "requirements.txt" in check and "extras.txt" not in check
    assert run.index(f"{TWIN}_CHECKED") < run.index(f"{READY}_CHECKED")
    (compile_line,) = run.having("chunksize=64))")  # the compile's last line, then its folders
    assert str(twin / "lib/site-packages") in compile_line and str(tmp_path / "env/lib/site-packages") in compile_line


def test_a_twin_pip_rejects_is_emptied_before_its_mark_and_gets_no_bytecode(tmp_path):
    twin, run = _twin_run(tmp_path, env={"STUB_TWIN_INSTALL": '["a"]'})
    assert run.returncode == 0, run.lines  # the maker's own set is not affected
    assert any(line.startswith(f"{TWIN}_REJECTED") for line in run.lines)
    assert not any(line.startswith(f"{TWIN}_CHECKED") for line in run.lines)
    assert list(twin.iterdir()) == []  # its volume can be built again while this one holds it
    assert f"{READY}_CHECKED" in run.lines
    (compile_line,) = run.having("chunksize=64))")  # the compile's last line, then its folders
    assert str(twin) not in compile_line


def test_the_twins_verdict_is_out_before_a_rejected_maker_exits(tmp_path):
    twin, run = _twin_run(tmp_path, env={"STUB_REPORT_INSTALL": '["b"]'})
    assert run.returncode == buildbox.UV_REJECTED
    assert run.index(f"{TWIN}_CHECKED") < run.index("RGBRIDGE_UV_REJECTED")


def test_no_twin_outside_uvs_install(tmp_path):
    twin, run = _twin_run(tmp_path, mode="pip")
    assert run.returncode == 0, run.lines
    assert not run.having(TWIN) and list(twin.iterdir()) == []


def test_the_twin_mark_is_not_found_by_a_search_for_the_ready_mark():
    assert READY not in TWIN and TWIN not in READY
    settings = buildbox.install_settings(
        ["a.txt", "b.txt"], mode="index", ready_mark=READY, twin_dir="/t", twin_after=1
    )
    assert settings["RGBRIDGE_TWIN_MARK"] == TWIN and settings["RGBRIDGE_TWIN_AFTER"] == "1"
    assert buildbox.install_settings(["a.txt"], mode="index", ready_mark=READY)["RGBRIDGE_TWIN_DIR"] == ""


# --------------------------------------------------------------------------- the offer, in-process


def test_a_build_lock_is_taken_only_when_free_and_released_from_any_thread(tmp_path, monkeypatch):
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path / "cache"))
    name = f"twin-test-{time.time_ns()}"
    held = threading.Event()
    release = threading.Event()

    def other() -> None:
        with build_lock(name):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    assert held.wait(10)
    assert try_build_lock(name) is None  # a build of it is under way
    release.set()
    thread.join(10)
    lock = try_build_lock(name)
    assert lock is not None and try_build_lock(name) is None
    threading.Thread(target=lock.close).start()  # a pending check's verdict may come in another thread
    deadline = time.monotonic() + 10
    while (again := try_build_lock(name)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    again.close()


class _Pending:
    log_tail = ""

    def settle(self) -> bool:
        return True


@pytest.fixture()
def no_books(monkeypatch, tmp_path):
    """The offer's disk books (lease, hold, budget) as no-ops: what is tested is the hand-off."""
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(twin_mod, "lease", lambda client, name: None)
    monkeypatch.setattr(twin_mod, "hold", lambda client, name: contextlib.nullcontext())
    monkeypatch.setattr(twin_mod, "room_ahead", lambda client, sets: True)


def _want() -> tuple[DepSet, EnvVolume]:
    tag = f"rgbridge-deps:t{time.time_ns() % 10**11}"
    return DepSet(base="b", tag=tag, files={"requirements.txt": "six\n"}), EnvVolume(f"v-{tag[-11:]}", "/opt/venv")


def test_a_twin_not_made_is_withdrawn_and_its_lock_let_go(no_books):
    want, volume = _want()
    with pytest.raises(RuntimeError), twin_mod.offered(None, want, volume, after=1, ready=False) as offer:  # type: ignore[arg-type]
        assert offer is not None
        assert try_build_lock(want.tag) is None
        raise RuntimeError("the maker's build failed")
    assert twin_mod.claim(want.tag, allow_pending_check=True, timeout=1) is None
    lock = try_build_lock(want.tag)
    assert lock is not None
    lock.close()


def test_a_pending_twin_is_claimed_once_and_never_by_who_cannot_settle_it(no_books):
    want, volume = _want()
    got: list[DepsImage | None] = []
    with twin_mod.offered(None, want, volume, after=1, ready=False) as offer:  # type: ignore[arg-type]
        assert offer is not None
        # a profile asking meanwhile waits for the maker's build
        waiter = threading.Thread(target=lambda: got.append(twin_mod.claim(want.tag, allow_pending_check=True)))
        waiter.start()
        time.sleep(0.3)
        assert not got
        image = DepsImage(tag="b", cached=False, seconds=1.0, volume=volume, pending_check=_Pending())
        offer.resolve(image)
        waiter.join(10)
    assert got == [image]
    assert twin_mod.claim(want.tag, allow_pending_check=True, timeout=1) is None  # handed out once
    assert try_build_lock(want.tag) is None  # kept by its pending check until the verdict
    offer.lock.close()

    other, other_volume = _want()
    with twin_mod.offered(None, other, other_volume, after=1, ready=False) as offer2:  # type: ignore[arg-type]
        assert offer2 is not None
        offer2.resolve(DepsImage(tag="b", cached=False, seconds=1.0, volume=other_volume, pending_check=_Pending()))
    assert twin_mod.claim(other.tag, allow_pending_check=False, timeout=1) is None  # left to the build lock
    twin_mod.withdraw(other.tag)
    offer2.lock.close()


def test_no_offer_when_the_set_is_on_disk_or_another_build_holds_it(no_books):
    want, volume = _want()
    with twin_mod.offered(None, want, volume, after=1, ready=True) as offer:  # type: ignore[arg-type]
        assert offer is None
    lock = try_build_lock(want.tag)
    assert lock is not None
    try:
        with twin_mod.offered(None, want, volume, after=1, ready=False) as offer:  # type: ignore[arg-type]
            assert offer is None
    finally:
        lock.close()


def test_the_twins_log_is_its_own_part_of_its_makers():
    log = "".join(
        f"{line}\n"
        for line in ("start", " + a==1", TWIN, " + b==2", READY, f"{TWIN}_CHECKED", f"{READY}_CHECKED", "compiled")
    )
    own = twin_mod.twin_log(log, TWIN)
    assert " + a==1" in own and f"{TWIN}_CHECKED" in own
    assert " + b==2" not in own and READY not in own.replace(TWIN, "")
    assert buildbox.installed_pins(own) == ["a==1"]
    assert twin_mod.made(log, READY) and twin_mod.verdict_in(log, READY) is True
    assert twin_mod.verdict_in(log.replace("_CHECKED", "_REJECTED x"), READY) is False
    assert twin_mod.verdict_in("start\n" + TWIN + "\n", READY) is None


# --------------------------------------------------------------------------- the real engine


def _nonce(reqs: str) -> str:
    return f"{reqs}six>=0.0.{time.time_ns()}\n"


def _manifest(client: docker.DockerClient, base: str, volume: str) -> list[str]:
    """Every entry of a set's volume: path, type, mode, owner, size and content hash (a link's
    target); bytecode only by name (a .pyc records the path it was compiled at), uv's
    ``uv_cache.json`` and the RECORD listing its hash only by name (they hold the moment of the
    install: two builds of the same set differ there too)."""
    script = (
        "cd /set && find . -mindepth 1 | LC_ALL=C sort | while read -r p; do "
        'if [ -L "$p" ]; then echo "$p L $(readlink "$p")"; '
        'elif [ -d "$p" ]; then echo "$p D $(stat -c %a:%u:%g "$p")"; '
        'else case "$p" in *.pyc) echo "$p F pyc";; */uv_cache.json|*.dist-info/RECORD) echo "$p F uv";; '
        '*) echo "$p F $(stat -c %a:%u:%g:%s "$p") $(sha256sum < "$p" | cut -c1-16)";; esac; fi; done'
    )
    out = client.containers.run(
        base,
        ["bash", "-c", script],
        remove=True,
        network_mode="none",
        user="0:0",
        mounts=[docker.types.Mount("/set", volume, type="volume", read_only=True, no_copy=True)],
    )
    return out.decode().splitlines()


@pytest.mark.docker
def test_a_twin_is_exactly_the_set_its_own_build_makes(docker_client, base_image, index_needed):
    """Byte for byte, owner and mode, bytecode by name: the twin compat's build made of six
    against strict's own build of the same file (another key, the same resolution)."""
    reqs = _nonce("six==1.16.0\n")
    twin_tag = deps_image_tag(base_image, reqs, in_volume=True)
    own_reqs = _nonce(reqs)
    made = own = None
    try:
        made = ensure_deps_image(
            docker_client, reqs, extra_packages=["iniconfig"], env_volume=True, twin=True, timeout=300
        )
        assert image_exists(docker_client, twin_tag)  # accepted by its own check, tagged
        again = ensure_deps_image(docker_client, reqs, env_volume=True, timeout=300)
        assert again.cached and again.volume is not None
        own = ensure_deps_image(docker_client, own_reqs, env_volume=True, timeout=300)
        assert own.volume is not None and not own.cached
        twin_files = _manifest(docker_client, base_image, again.volume.name)
        own_files = _manifest(docker_client, base_image, own.volume.name)
        assert any("six-1.16.0.dist-info" in line for line in twin_files)
        assert not any("iniconfig" in line for line in twin_files)  # the maker's second file
        assert any("six.cpython-311.pyc" in line for line in twin_files)  # its own late compile
        assert twin_files == own_files
    finally:
        for tag in (twin_tag, made.tag if made else "", own.tag if own else ""):
            if tag and image_exists(docker_client, tag):
                docker_client.images.remove(tag)
        for image in (made, own):
            if image is not None and image.volume is not None:
                remove_volume(docker_client, image.volume.name)
        remove_volume(docker_client, f"rgbridge-env-{twin_tag.rpartition(':')[2]}")


@pytest.mark.docker
def test_a_rejected_twin_is_built_again_by_pip_in_its_volume(
    docker_client, base_image, index_needed, monkeypatch, wrong_uv
):
    """uv's choice pip rejects (a stand-in uv installing six 1.15.0 for six==1.16.0): the twin's
    own check rejects it while its maker still runs, and pip's rebuild of it, in the same
    volume, holds pip's choice and nothing of uv's."""
    monkeypatch.setattr(buildbox, "uv_tool", lambda: wrong_uv)
    reqs = _nonce("six==1.16.0\n")
    twin_tag = deps_image_tag(base_image, reqs, in_volume=True)
    maker = ensure_deps_image(
        docker_client,
        reqs,
        extra_packages=["iniconfig"],
        env_volume=True,
        allow_pending_check=True,
        twin=True,
        timeout=300,
    )
    twin_set = twin_mod.claim(twin_tag, allow_pending_check=True, timeout=60)
    by_pip = None
    try:
        assert twin_set is not None and twin_set.pending_check is not None and twin_set.volume is not None
        assert twin_set.settle() is False
        assert "made by the build of" in twin_set.build_log() and "_REJECTED" in twin_set.build_log()
        assert not image_exists(docker_client, twin_tag)
        by_pip = ensure_deps_image(docker_client, reqs, env_volume=True, installer="pip", timeout=300)
        assert by_pip.volume == twin_set.volume and "RGBRIDGE_INSTALLER=pip" in by_pip.log_tail
        code = docker_client.containers.run(
            base_image,
            ["python", "-c", "import six, sys; sys.exit(six.__version__ != '1.16.0')"],
            remove=True,
            network_mode="none",
            mounts=[docker.types.Mount("/opt/venv", by_pip.volume.name, type="volume", read_only=True, no_copy=True)],
        )
        assert code == b""
        assert maker.settle() is False  # the maker's own set is rejected too, on its own check
    finally:
        maker.settle()
        wait_for_compiles(120)
        for tag in (twin_tag,):
            if image_exists(docker_client, tag):
                docker_client.images.remove(tag)
        for image in (maker, by_pip):
            if image is not None and image.volume is not None:
                remove_volume(docker_client, image.volume.name)


@pytest.mark.docker
def test_a_score_with_both_profiles_builds_one_set_for_both(
    docker_client, base_image, index_needed, tmp_path, score_sets
):
    """End to end: a never-seen set scored with both profiles; strict's set is compat's twin,
    accepted, tagged and compiled; the scores are the oracle's."""
    from bridge.scoring.run.engine import score_repo
    from bridge.scoring.types import ScoreRequest
    from bridge.tasks.catalog import Catalog

    task = Catalog.from_options(None).get("library-api")
    repo = tmp_path / "repo"
    shutil.copytree(task.solution_dir, repo)
    (repo / "requirements.txt").write_text(_nonce((repo / "requirements.txt").read_text()))
    score_sets(base_image, repo, task)
    result = score_repo(task, repo, ScoreRequest(profile="both", use_cache=False, output_dir=tmp_path / "out"))
    for name in ("strict", "compat"):
        prof = result.profile(name)
        assert prof.outcome == "scored" and prof.pass_at_1.score == 1.0, (name, prof)
    strict_log = (tmp_path / "out/logs/strict/build.log").read_text()
    assert strict_log.startswith("made by the build of rgbridge-deps:")
    assert buildbox.twin_mark("RGBRIDGE_READY_")[:14] in strict_log and "_CHECKED" in strict_log
    from bridge.scoring.run.workdir import requirements_of

    tag = deps_image_tag(base_image, requirements_of(repo), in_volume=True)
    assert image_exists(docker_client, tag)
    assert wait_for_compiles(120)
    volume = f"rgbridge-env-{tag.rpartition(':')[2]}"
    assert volume_exists(docker_client, volume)
    pyc = "/opt/venv/lib/python3.11/site-packages/fastapi/__pycache__/__init__.cpython-311.pyc"
    code = docker_client.containers.run(
        base_image,
        ["test", "-f", pyc],
        remove=True,
        network_mode="none",
        mounts=[docker.types.Mount("/opt/venv", volume, type="volume", read_only=True, no_copy=True)],
    )
    assert code == b""
