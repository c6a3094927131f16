"""Dependency sets kept in volumes (issue 12): a never-seen set is installed into a volume seeded
with the base's venv; sandboxes mount it read-only; a score may start while pip still checks
uv's install, and pip's rejection means the set is built again by pip and the score run again.
Engine tests use the real engine and the package index (skipped where containers cannot reach it).
"""

from __future__ import annotations

import threading
import time

import docker
import pytest

from bridge.errors import ScoringError
from bridge.scoring.images.base import image_exists, volume_exists
from bridge.scoring.images.disk import list_images, remove_images
from bridge.scoring.images.sets import (
    REJECTED_NOTE,
    SEED_MARK,
    buildbox,
    bytecode,
    deps_image_tag,
    ensure_deps_image,
    seed_volume,
    seeded_start,
    venv_path,
)
from bridge.scoring.images.sets import env_volume as env_mod
from bridge.scoring.sandbox.docker_sandbox import DockerRuntime
from bridge.scoring.sandbox.protocol import SandboxSpec
from tests import install_script_runner


def test_layer_script_checks_once_after_every_file_and_compiles_once(tmp_path):
    run = install_script_runner.run(
        tmp_path / "a", ["requirements.txt", "extras.txt"], mode="index", ready_mark="READY"
    )
    assert run.returncode == 0, run.lines
    checks = run.having("pip install --dry-run")
    assert len(checks) == 1
    assert f"-r {run.build_dir}/requirements.txt -r {run.build_dir}/extras.txt" in checks[0]
    compiling = run.having("--compile-bytecode")
    assert len(compiling) == 1  # on the last file's install (uv compiles it all)
    assert f"-r {run.build_dir}/extras.txt" in compiling[0]
    # the environment is final (ready) before pip's check starts
    assert run.index("READY") < run.index("pip install --dry-run")
    unchecked = install_script_runner.run(tmp_path / "b", ["requirements.txt"], mode="index", check=False)
    assert unchecked.returncode == 0 and not unchecked.having("pip install --dry-run")


def test_a_set_pip_rejects_exits_uv_rejected(tmp_path):
    run = install_script_runner.run(
        tmp_path, ["requirements.txt"], mode="index", env={"STUB_REPORT_INSTALL": '[{"name": "six"}]'}
    )
    assert run.returncode == buildbox.UV_REJECTED
    assert run.having("RGBRIDGE_UV_REJECTED pip does not accept what uv installed")


def test_sets_in_volumes_compile_bytecode_after_the_ready_mark_and_pips_verdict(tmp_path):
    """Bytecode off the score's critical path (issue 23): the score starts at the ready mark and
    its set is accepted at pip's verdict, printed before the bytecode is compiled."""
    run = install_script_runner.run(
        tmp_path / "a", ["requirements.txt", "extras.txt"], mode="index", ready_mark="READY", compile_late=True
    )
    assert run.returncode == 0, run.lines
    assert not run.having("--compile-bytecode")
    checked = buildbox.checked_mark("READY")
    assert run.lines.index("READY") < run.index("pip install --dry-run") < run.lines.index(checked)
    assert run.lines.index(checked) < run.index("compileall.compile_file")  # no hold: nothing waited for
    early = install_script_runner.run(tmp_path / "b", ["requirements.txt"], mode="index", ready_mark="READY")
    assert early.returncode == 0 and not early.having("compileall")


def test_a_held_compile_waits_for_the_go_signal_after_the_verdict(tmp_path):
    checked = buildbox.checked_mark("READY")
    proc, trace, build = install_script_runner.start(
        tmp_path, ["requirements.txt"], mode="index", ready_mark="READY", compile_late=True, hold_compile=True
    )
    try:
        install_script_runner.wait_for(trace, checked)
        time.sleep(1.5)  # the stand-in compile is instant: an unheld one would be in the trace by now
        assert "compileall" not in trace.read_text() and proc.poll() is None
        # the handler was set before anything was printed (the host signals after the verdict's mark)
        install_script_runner.go(proc)
    finally:
        run = install_script_runner.finish(proc, trace, build)
    assert run.returncode == 0, run.lines
    assert run.lines.index(checked) < run.index("compileall.compile_file")
    assert buildbox.install_settings(["r.txt"], mode="index", hold_compile=True)["RGBRIDGE_HOLD_LIMIT"] == str(
        buildbox.HOLD_LIMIT
    )


def test_a_held_compile_goes_at_its_limit_without_the_signal(tmp_path):
    run = install_script_runner.run(
        tmp_path,
        ["requirements.txt"],
        mode="index",
        ready_mark="READY",
        compile_late=True,
        hold_compile=True,
        overrides={"RGBRIDGE_HOLD_LIMIT": "1"},
    )
    assert run.returncode == 0 and run.having("compileall.compile_file")


def test_uv_hard_links_from_a_cache_inside_the_environment_removed_before_it_is_ready(tmp_path):
    """uv's cache sits on the environment's own file system (no second copy of every file, no
    unpacking through the container's overlay /tmp) and is gone before the ready mark."""
    run = install_script_runner.run(tmp_path, ["requirements.txt", "extras.txt"], mode="index", ready_mark="READY")
    installs = run.having("STUB uv pip install")
    assert len(installs) == 2 and all("--link-mode hardlink" in line for line in installs)
    assert all(f"--cache-dir {tmp_path}/env/.rgbridge-uv-cache " in line for line in installs)
    assert not run.having("/tmp/rgbridge-uv")
    assert not run.having("uv cache present at the check")  # removed before the ready mark and the check
    assert run.last("STUB uv pip install") < run.lines.index("READY")


def test_install_settings_take_only_plain_file_names():
    for name in ("a b.txt", "../requirements.txt", "x;rm -rf /", ""):
        with pytest.raises(ValueError):
            buildbox.install_settings([name], mode="index")
    with pytest.raises(ValueError):
        buildbox.install_settings(["requirements.txt"], mode="anything")


def test_seeded_start_refuses_an_unfinished_seed_and_drops_the_mark():
    cmd = seeded_start("/opt/venv")
    assert cmd.index(f"[ -f /run/rgbridge/seed/{SEED_MARK} ]") < cmd.index("cp -a")
    assert f"rm -f /opt/venv/{SEED_MARK}" in cmd and cmd.endswith(f"exec bash {buildbox.BUILD_SCRIPT}")


# ---------------------------------------------------------------- real engine


def _nonce(reqs: str) -> str:
    return f"{reqs}six>=0.0.{time.time_ns()}\n"


def _untag(client: docker.DockerClient, tag: str) -> None:
    # by name: a set's tag sits on the base image, whose other tags stay
    if image_exists(client, tag):
        client.images.remove(tag)


def _sandbox_run(client: docker.DockerClient, image: str, volumes: dict[str, str], script: str) -> tuple[int, str]:
    box = DockerRuntime(client).create(
        SandboxSpec(image=image, name=f"rgbridge-test-env-{time.time_ns()}", command=["sleep", "60"], volumes=volumes)
    )
    with box:
        box.start()
        out = box.exec(["sh", "-c", script], 60, max_output=100_000)
        return out.exit_code or 0, out.output


@pytest.mark.docker
def test_a_set_in_a_volume_is_mounted_read_only_and_found_again(docker_client, base_image, index_needed):
    path = venv_path(docker_client, base_image)
    assert path == "/opt/venv"
    reqs = _nonce("six==1.16.0\n")
    first = ensure_deps_image(docker_client, reqs, env_volume=True, timeout=300)
    try:
        assert first.volume is not None and not first.cached and first.pending_check is None
        assert first.mounts == {first.volume.name: "/opt/venv"}
        # the tag marks the finished set: it is the base image itself, the set is in the volume
        assert docker_client.images.get(first.tag).id == docker_client.images.get(base_image).id
        vol = docker_client.volumes.get(first.volume.name)
        assert vol.attrs["Labels"]["rgbridge.deps_tag"] == first.tag
        code, out = _sandbox_run(
            docker_client,
            first.tag,
            first.mounts,
            "python -c 'import six; print(six.__version__)'; python -m pip --version;"
            " ls -a /opt/venv; touch /opt/venv/x 2>&1; echo rc=$?",
        )
        assert "1.16.0" in out and "pip " in out  # the set, and the base's venv around it
        assert SEED_MARK not in out and "pyvenv.cfg" in out
        assert ".rgbridge-uv-cache" not in out and ".lock" not in out  # uv's scratch is gone
        assert "Read-only file system" in out and "rc=1" in out  # agents cannot change the set
        again = ensure_deps_image(docker_client, reqs, env_volume=True)
        assert again.cached and again.tag == first.tag and again.volume == first.volume
        listed = {i.tag: i.kind for i in list_images(docker_client)}
        assert listed[first.tag] == "deps"
    finally:
        _untag(docker_client, first.tag)
        env_mod.remove_volume(docker_client, first.volume.name if first.volume else "")


@pytest.mark.docker
def test_a_set_whose_volume_went_away_is_built_again(docker_client, base_image, index_needed):
    reqs = _nonce("six==1.16.0\n")
    first = ensure_deps_image(docker_client, reqs, env_volume=True, timeout=300)
    assert first.volume is not None
    try:
        env_mod.remove_volume(docker_client, first.volume.name)
        with pytest.raises(ScoringError, match="not found"):  # never an empty volume made on the fly
            _sandbox_run(docker_client, first.tag, first.mounts, "true")
        assert not volume_exists(docker_client, first.volume.name)
        again = ensure_deps_image(docker_client, reqs, env_volume=True, timeout=300)
        assert not again.cached and volume_exists(docker_client, first.volume.name)
    finally:
        _untag(docker_client, first.tag)
        env_mod.remove_volume(docker_client, first.volume.name)


@pytest.mark.docker
def test_a_pending_check_holds_the_set_until_pip_accepts(docker_client, base_image, index_needed):
    reqs = _nonce("six==1.16.0\n")
    deps = ensure_deps_image(docker_client, reqs, env_volume=True, allow_pending_check=True, timeout=300)
    assert deps.volume is not None
    other: list = []
    try:
        assert deps.pending_check is not None and deps.tag == base_image  # scored from the base + volume
        code, out = _sandbox_run(docker_client, deps.tag, deps.mounts, "python -c 'import six; print(six.__version__)'")
        assert "1.16.0" in out
        # Another request for the set waits for pip's verdict instead of building it again.
        thread = threading.Thread(
            target=lambda: other.append(ensure_deps_image(docker_client, reqs, env_volume=True, timeout=300))
        )
        thread.start()
        time.sleep(1.0)
        assert not other
        assert deps.settle() is True and deps.settle() is True  # idempotent
        thread.join(60)
        assert other and other[0].cached and image_exists(docker_client, other[0].tag)
        assert "RGBRIDGE_PHASE checked" in deps.build_log()
    finally:
        deps.settle()
        _untag(docker_client, other[0].tag if other else "rgbridge-deps:none")
        env_mod.remove_volume(docker_client, deps.volume.name)


@pytest.mark.docker
def test_a_pending_check_runs_from_the_ready_mark_at_the_lowest_cpu_weight(docker_client, base_image, index_needed):
    """pip's check runs beside the score at once, on the CPU the score leaves idle (weight 2):
    nothing releases it, and the verdict is out before anyone asks for it. Held until a profile
    ended (at weight 64) it ran mostly after the score, whose last second it became."""
    reqs = _nonce("six==1.16.0\n")
    deps = ensure_deps_image(docker_client, reqs, env_volume=True, allow_pending_check=True, timeout=300)
    try:
        assert deps.volume is not None and deps.pending_check is not None
        (build,) = docker_client.containers.list(all=True, filters={"volume": deps.volume.name})
        build.reload()
        assert build.attrs["HostConfig"]["CpuShares"] == env_mod.CHECK_CPU_SHARES == 2
        assert buildbox.wait_ready(build, "RGBRIDGE_PHASE checked", 120)  # nobody settled it yet
        assert deps.settle() is True
        assert "RGBRIDGE_PHASE checked" in deps.build_log()
    finally:
        deps.settle()
        env_mod.wait_for_compiles(120)
        _untag(docker_client, deps_image_tag(base_image, reqs, in_volume=True))
        if deps.volume is not None:
            env_mod.remove_volume(docker_client, deps.volume.name)


@pytest.mark.docker
def test_a_pending_sets_bytecode_waits_for_the_end_of_its_score(
    docker_client, base_image, index_needed, tmp_path, monkeypatch
):
    """The whole environment's bytecode (seconds of CPU) is compiled only once the score it was
    left pending beside is over (``settle``), not while that score runs (issue 23). An empty
    package cache of its own: no bytecode store has six's (sets/bytecode.py)."""
    monkeypatch.setenv("RGBRIDGE_WHEEL_CACHE", str(tmp_path / "wheels"))
    reqs = _nonce("six==1.16.0\n")
    deps = ensure_deps_image(docker_client, reqs, env_volume=True, allow_pending_check=True, timeout=300)
    assert deps.volume is not None and deps.pending_check is not None
    pyc = "/opt/venv/lib/python3.11/site-packages/__pycache__/six.cpython-311.pyc"
    try:
        builds = docker_client.containers.list(all=True, filters={"volume": deps.volume.name})
        assert len(builds) == 1
        assert buildbox.wait_ready(builds[0], "RGBRIDGE_PHASE checked", 120)
        time.sleep(2.0)  # the verdict is out: before this change the bytecode was compiled now
        builds[0].reload()
        assert builds[0].status == "running"  # held, not finished
        code, out = _sandbox_run(docker_client, deps.tag, deps.mounts, f"ls {pyc} 2>&1; python -c 'import six'")
        assert "No such file" in out
        assert deps.settle() is True
        assert env_mod.wait_for_compiles(120)
        code, out = _sandbox_run(docker_client, deps.tag, deps.mounts, f"ls {pyc}")
        assert code == 0 and pyc in out
        assert not docker_client.containers.list(all=True, filters={"id": builds[0].id})  # removed
    finally:
        deps.settle()
        env_mod.wait_for_compiles(120)
        _untag(docker_client, deps_image_tag(base_image, reqs, in_volume=True))  # the accepted set's tag
        env_mod.remove_volume(docker_client, deps.volume.name)
        env_mod.remove_volume(docker_client, bytecode.store_name(docker_client, base_image))  # the cache's own store


@pytest.mark.docker
def test_what_pip_rejects_is_dropped_and_built_by_pip(docker_client, base_image, index_needed, monkeypatch, wrong_uv):
    """An installer that picks a version the requirements forbid (a stand-in for any uv choice
    pip's rules reject): the pending check rejects it, the volume and tag are gone, and
    ``installer="pip"`` gives pip's own result."""
    monkeypatch.setattr(buildbox, "uv_tool", lambda: wrong_uv)
    reqs = _nonce("six==1.16.0\n")
    deps = ensure_deps_image(docker_client, reqs, env_volume=True, allow_pending_check=True, timeout=300)
    assert deps.volume is not None
    try:
        assert deps.pending_check is not None
        assert deps.settle() is False
        assert "pip does not accept what uv installed" in deps.build_log()
        assert not volume_exists(docker_client, deps.volume.name)
        tag = f"rgbridge-deps:{deps.volume.name.rpartition('-')[2]}"
        assert not image_exists(docker_client, tag)
        by_pip = ensure_deps_image(
            docker_client, reqs, env_volume=True, allow_pending_check=True, installer="pip", timeout=300
        )
        assert by_pip.pending_check is None and by_pip.tag == tag
        assert "RGBRIDGE_INSTALLER=pip" in by_pip.log_tail
        code, out = _sandbox_run(
            docker_client, by_pip.tag, by_pip.mounts, "python -c 'import six; print(six.__version__)'"
        )
        assert "1.16.0" in out
        # Without a pending check the build itself falls back to pip.
        inline = ensure_deps_image(docker_client, _nonce("six==1.16.0\n"), env_volume=True, timeout=300)
        assert "installing with pip instead" in inline.log_tail and inline.volume is not None
        _untag(docker_client, inline.tag)
        env_mod.remove_volume(docker_client, inline.volume.name)
    finally:
        _untag(docker_client, f"rgbridge-deps:{deps.volume.name.rpartition('-')[2]}")
        env_mod.remove_volume(docker_client, deps.volume.name)


@pytest.mark.docker
def test_an_unfinished_seed_is_made_again(docker_client, base_image, index_needed):
    path = venv_path(docker_client, base_image)
    assert path is not None
    seed = seed_volume(docker_client, base_image, path)
    env_mod.wait_for_compiles()  # builds still compiling bytecode into accepted sets mount the seed
    assert env_mod.remove_volume(docker_client, seed)
    # a seed whose maker died before its mark: the volume exists, the mark does not
    docker_client.volumes.create(seed, labels={"rgbridge.owner": "rgbridge", "rgbridge.kind": "deps-seed"})
    deps = ensure_deps_image(docker_client, _nonce("six==1.16.0\n"), env_volume=True, timeout=300)
    assert deps.volume is not None
    try:
        assert "seed volume was incomplete" in deps.log_tail
        code, out = _sandbox_run(docker_client, deps.tag, deps.mounts, "python -c 'import six; print(six.__version__)'")
        assert "1.16.0" in out
    finally:
        _untag(docker_client, deps.tag)
        env_mod.remove_volume(docker_client, deps.volume.name)


@pytest.mark.docker
def test_a_seed_being_made_is_not_handed_out_before_it_is_full(docker_client, base_image):
    """Two builds wanting the seed at once: the second waits for the first's copy to finish
    (a seed volume exists before it is full; once it was handed out half-made)."""
    path = venv_path(docker_client, base_image)
    assert path is not None
    name = seed_volume(docker_client, base_image, path)
    env_mod.wait_for_compiles()  # builds still compiling bytecode into accepted sets mount the seed
    assert env_mod.remove_volume(docker_client, name)
    first_done = threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        try:
            seed_volume(docker_client, base_image, path)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            first_done.set()

    maker = threading.Thread(target=first)
    maker.start()
    deadline = time.monotonic() + 60
    while not volume_exists(docker_client, name) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert volume_exists(docker_client, name) and not first_done.is_set()
    assert seed_volume(docker_client, base_image, path) == name
    finished_before_second_returned = first_done.is_set()
    maker.join()
    assert not errors
    assert finished_before_second_returned


@pytest.mark.docker
def test_removing_deps_images_removes_their_volumes_and_keeps_the_base(docker_client, base_image, index_needed):
    deps = ensure_deps_image(docker_client, _nonce("six==1.16.0\n"), env_volume=True, timeout=300)
    assert deps.volume is not None
    keep = [
        t
        for i in docker_client.images.list(filters={"label": "rgbridge.owner=rgbridge"})
        for t in i.tags
        if t != deps.tag
    ]
    removed = remove_images(docker_client, kinds=["deps"], keep=keep)
    assert deps.tag in removed and deps.volume.name in removed
    assert not image_exists(docker_client, deps.tag) and not volume_exists(docker_client, deps.volume.name)
    assert image_exists(docker_client, base_image)


def test_rejected_note_says_what_happened():
    assert "pip" in REJECTED_NOTE and REJECTED_NOTE.endswith("\n")


@pytest.mark.docker
def test_a_score_pip_rejects_is_run_again_on_pips_set(
    docker_client, base_image, index_needed, monkeypatch, wrong_uv, tmp_path, score_sets
):
    """End to end, both profiles: the score starts on uv's set, pip rejects it, the profile is
    scored again on pip's own set and the build log says so; the result is the oracle's."""
    import shutil

    from bridge.scoring.run.engine import ScoreOptions, score_repo
    from bridge.scoring.types import ScoreRequest
    from bridge.tasks.catalog import Catalog

    monkeypatch.setattr(buildbox, "uv_tool", lambda: wrong_uv)
    task = Catalog.from_options(None).get("library-api")
    repo = tmp_path / "repo"
    shutil.copytree(task.solution_dir, repo)
    (repo / "requirements.txt").write_text(_nonce((repo / "requirements.txt").read_text()))
    score_sets(base_image, repo, task)
    progress: list[str] = []
    result = score_repo(
        task,
        repo,
        ScoreRequest(profile="both", use_cache=False, output_dir=tmp_path / "out"),
        ScoreOptions(progress=progress.append),
    )
    for name in ("strict", "compat"):
        prof = result.profile(name)
        assert prof.outcome == "scored" and prof.pass_at_1.score == 1.0, (name, prof)
        log = (tmp_path / "out" / "logs" / name / "build.log").read_text()
        assert log.startswith(REJECTED_NOTE) and "Successfully installed" in log  # pip's own install
        assert any(line == f"{name}: {REJECTED_NOTE.strip()}" for line in progress)
    listed = [t for t in (i.tag for i in list_images(docker_client)) if t.startswith("rgbridge-deps:")]
    assert listed  # pip's sets are kept
