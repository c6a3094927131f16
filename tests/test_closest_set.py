"""A never-seen set started from the closest finished set on disk (issue 23): the delta build
holds exactly what a build from scratch holds, the closest set is never changed, and any doubt
(a removed or changed line, an environment a fresh resolution would not give) means a build
from scratch. Engine tests use the real engine and the package index."""

from __future__ import annotations

import time

import docker
import pytest

from bridge.scoring.images.base import ensure_base_image, image_exists
from bridge.scoring.images.sets import DepSet, DepsImage, closest, deps_scope, ensure_deps_image, remove_volume
from bridge.scoring.sandbox.docker_sandbox import DockerRuntime
from bridge.scoring.sandbox.protocol import SandboxSpec
from tests import install_script_runner


def test_added_lines_only_counts_kept_sets_of_lines():
    old = {"requirements.txt": "fastapi==0.115.0\nuvicorn\n"}
    assert closest.added_lines(old, {"requirements.txt": "fastapi==0.115.0\nhttpx\nuvicorn\n"}) == 1
    assert closest.added_lines(old, old) == 0
    # a changed pin is a removed line; a removed line; another file set; an option line
    assert closest.added_lines(old, {"requirements.txt": "fastapi==0.116.0\nuvicorn\n"}) is None
    assert closest.added_lines(old, {"requirements.txt": "uvicorn\nhttpx\n"}) is None
    assert closest.added_lines(old, {**old, "extras.txt": "pytest\n"}) is None
    assert closest.added_lines(old, {"requirements.txt": old["requirements.txt"] + "--pre\n"}) is None


def test_merged_pins_replace_by_project():
    assert closest.merged_pins(["Six==1.15.0", "idna==3.6"], ["six==1.16.0"]) == ["idna==3.6", "six==1.16.0"]


def test_delta_check_resolves_each_file_in_turn_before_the_ready_mark(tmp_path):
    reqs = ["/tmp/rgbridge-build/requirements.txt", "/tmp/rgbridge-build/extras.txt"]
    lines = closest.delta_check(reqs, "/run/rgbridge/seed")
    assert sum(line.count('uv" pip compile') for line in lines) == 2
    assert any("/tmp/rgbridge-build/requirements.txt /tmp/rgbridge-build/extras.txt -o" in line for line in lines)
    assert all(f"exit {closest.DELTA_DIFFERS}" in line for line in lines if 'uv" pip' in line)
    # in the install script: after every install, before the ready mark
    files = ["requirements.txt", "extras.txt"]
    run = install_script_runner.run(tmp_path / "a", files, mode="index", ready_mark="READY", verify=lines)
    assert run.returncode == 0, run.lines
    assert len(run.having("STUB uv pip compile")) == 2
    assert run.last("STUB uv pip install") < run.index("STUB uv pip compile") < run.lines.index("READY")
    differs = install_script_runner.run(
        tmp_path / "b", files, mode="index", ready_mark="READY", verify=lines, env={"STUB_UV_COMPILE_EXIT": "1"}
    )
    assert differs.returncode == closest.DELTA_DIFFERS and "READY" not in differs.lines
    # pip and local builds never run it
    pip = install_script_runner.run(tmp_path / "c", files, mode="pip", ready_mark="READY", verify=lines)
    assert pip.returncode == 0 and not pip.having("uv pip compile")


# ---------------------------------------------------------------- real engine


@pytest.fixture()
def always(monkeypatch):
    monkeypatch.setenv(closest.CLOSEST_ENV, "always")


def _nonce() -> str:
    return f"six>=0.0.{time.time_ns()}\n"  # a new key, nothing more installed


def _freeze(client: docker.DockerClient, deps: DepsImage) -> list[str]:
    box = DockerRuntime(client).create(
        SandboxSpec(
            image=deps.tag, name=f"rgbridge-test-closest-{time.time_ns()}", command=["sleep", "60"], volumes=deps.mounts
        )
    )
    with box:
        box.start()
        out = box.exec(["python", "-m", "pip", "freeze", "--all"], 60, max_output=100_000)
        assert out.exit_code == 0, out.output
        return sorted(line for line in out.output.splitlines() if "==" in line)


def _drop(client: docker.DockerClient, *sets: DepsImage) -> None:
    for deps in sets:
        if deps.volume is not None:
            tag = f"rgbridge-deps:{deps.volume.name.rpartition('-')[2]}"
            if image_exists(client, tag):
                client.images.remove(tag)
            remove_volume(client, deps.volume.name)
            closest.forget(client, deps.volume.name)


@pytest.mark.docker
def test_a_set_started_from_the_closest_one_equals_one_built_from_scratch(
    docker_client, base_image, index_needed, always
):
    first = ensure_deps_image(docker_client, "six==1.16.0\n" + _nonce(), env_volume=True, timeout=300)
    assert first.volume is not None
    before = _freeze(docker_client, first)
    grown = fresh = None
    try:
        # the new set's lines: the first set's (with its nonce), plus one package
        record = next(r for r in closest.records(docker_client) if r.volume == first.volume.name)
        assert record.pins == ["six==1.16.0"]
        grown_reqs = record.files["requirements.txt"] + "idna==3.7\n"
        grown = ensure_deps_image(docker_client, grown_reqs, env_volume=True, allow_pending_check=True, timeout=300)
        assert grown.settle() is True
        assert "started from the closest set" in grown.build_log() and "built from scratch" not in grown.build_log()
        assert "RGBRIDGE_PHASE verified" in grown.build_log()
        fresh_reqs = "six==1.16.0\n" + _nonce() + "idna==3.7\n"
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(closest.CLOSEST_ENV, "never")
            fresh = ensure_deps_image(docker_client, fresh_reqs, env_volume=True, timeout=300)
        assert "started from the closest set" not in fresh.log_tail
        assert _freeze(docker_client, grown) == _freeze(docker_client, fresh)
        assert "idna==3.7" in _freeze(docker_client, grown)
        assert _freeze(docker_client, first) == before  # the closest set is only read
    finally:
        _drop(docker_client, first, *(s for s in (grown, fresh) if s is not None))


@pytest.mark.docker
def test_a_changed_pin_is_built_from_scratch(docker_client, base_image, index_needed, always):
    first = ensure_deps_image(docker_client, "six==1.16.0\n" + _nonce(), env_volume=True, timeout=300)
    record = next(r for r in closest.records(docker_client) if first.volume and r.volume == first.volume.name)
    changed = record.files["requirements.txt"].replace("six==1.16.0", "six==1.15.0") + "idna==3.7\n"
    other = None
    try:
        other = ensure_deps_image(docker_client, changed, env_volume=True, timeout=300)
        assert "started from the closest set" not in other.log_tail
        assert "six==1.15.0" in _freeze(docker_client, other)
    finally:
        _drop(docker_client, first, *(s for s in (other,) if s is not None))


@pytest.mark.docker
def test_an_environment_a_fresh_resolution_would_not_give_falls_back(docker_client, base_image, index_needed, always):
    """A closest set whose environment holds more than its files resolve to (a stand-in for an
    index that moved since it was built): the check refuses the delta, the set is built from
    scratch and holds only what a fresh build holds."""
    wider = ensure_deps_image(docker_client, "six==1.16.0\nidna==3.6\n" + _nonce(), env_volume=True, timeout=300)
    assert wider.volume is not None
    base = ensure_base_image(docker_client)
    narrow_files = {"requirements.txt": "six==1.16.0\n" + _nonce()}
    # the books say the wider set's volume holds the narrow files' set
    wider_tag = f"rgbridge-deps:{wider.volume.name.rpartition('-')[2]}"
    fake = DepSet(base=base, tag=wider_tag, files=narrow_files, scope=deps_scope(base, in_volume=True))
    closest.remember(docker_client, wider.volume.name, fake, ["six==1.16.0"])
    grown = None
    try:
        grown = ensure_deps_image(
            docker_client, narrow_files["requirements.txt"] + "certifi\n", env_volume=True, timeout=300
        )
        log = grown.log_tail
        assert "started from the closest set" in log and "built from scratch" in log, log
        frozen = _freeze(docker_client, grown)
        assert not any(line.startswith("idna==") for line in frozen), frozen
        assert any(line.startswith("certifi==") for line in frozen)
    finally:
        closest.forget(docker_client, wider.volume.name)
        _drop(docker_client, wider, *(s for s in (grown,) if s is not None))
