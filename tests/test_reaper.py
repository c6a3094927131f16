"""A process that exits while a set's bytecode still compiles hands the build container to a
reaper of its own (issue 41): `rgbridge score` ends with its result, and the container is still
removed once it ends."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bridge.scoring.sandbox.docker_client import make_labels


@pytest.mark.docker
def test_exit_does_not_wait_for_a_compile_and_the_container_is_reaped(docker_client, base_image, repo_root):
    container = docker_client.containers.run(
        base_image, ["sleep", "15"], detach=True, labels=make_labels(kind="test"), network_mode="none"
    )
    try:
        script = (
            "import sys, time\n"
            "from bridge.scoring.images.sets import env_volume\n"
            "from bridge.scoring.sandbox.docker_client import get_client\n"
            "c = get_client().containers.get(sys.argv[1])\n"
            "env_volume._reap(c, time.monotonic() + 120)\n"  # a compile that would run for 15 s
        )
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", script, container.id], cwd=repo_root, check=True, timeout=120)
        assert time.monotonic() - started < 10, "the process waited for the compile"
        container.reload()
        assert container.status == "running"  # the compile goes on after the process
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if not docker_client.containers.list(all=True, filters={"id": container.id}):
                break
            time.sleep(1)
        else:
            pytest.fail("the reaper did not remove the container once it ended")
        assert time.monotonic() - started >= 14, "removed before the compile ended"
    finally:
        with __import__("contextlib").suppress(Exception):
            container.remove(force=True)
