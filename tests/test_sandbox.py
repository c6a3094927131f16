"""The Sandbox interface and its Docker implementation, on the real engine: copy in, exec with a
timeout that kills, capped output, copy out with a size cap, shared loopback, removal."""

from __future__ import annotations

import os
import secrets
import time

import pytest

from bridge.scoring.sandbox.archives import UnsafeArchiveError
from bridge.scoring.sandbox.docker_client import LABEL_RUN
from bridge.scoring.sandbox.docker_sandbox import DockerRuntime, DockerSandbox
from bridge.scoring.sandbox.protocol import Sandbox, SandboxLimits, SandboxSpec

RUN = f"test-sbx-{secrets.token_hex(3)}"


def _spec(image: str, what: str, command: list[str], **kw) -> SandboxSpec:
    return SandboxSpec(
        image=image,
        name=f"rgbridge-t-{RUN}-{what}-{secrets.token_hex(2)}",
        command=command,
        kind="test",
        run_id=RUN,
        **kw,
    )


def _ours(client) -> list:
    return client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={RUN}"})


@pytest.mark.docker
def test_docker_sandbox_round_trip_and_cleanup(docker_client, base_image, tmp_path):
    src = tmp_path / "snap"
    src.mkdir()
    (src / "data.txt").write_text("hello\n")
    (src / "big.bin").write_bytes(b"0" * 50_000)
    os.symlink("/etc/passwd", src / "link")
    runtime = DockerRuntime(docker_client)
    with runtime.create(_spec(base_image, "rt", ["sleep", "300"], workdir="/repo", env={"X": "1"})) as box:
        assert isinstance(box, Sandbox) and isinstance(box, DockerSandbox)
        assert box.image_id.startswith("sha256:")
        box.copy_in(src, "/repo")
        box.copy_in(src, "/opt/as-root", uid=0, gid=0)
        box.start()
        who = box.exec(["sh", "-c", "id -u; echo $X; stat -c '%u %n' /repo/data.txt /opt/as-root/data.txt"], 10)
        assert who.exit_code == 0 and not who.timed_out
        assert who.output.split("\n")[:4] == ["10001", "1", "10001 /repo/data.txt", "0 /opt/as-root/data.txt"]
        # the timeout kills the whole command, not just the shell
        started = time.monotonic()
        slow = box.exec(["sh", "-c", "sleep 100 & sleep 100"], 2)
        assert slow.timed_out and time.monotonic() - started < 15
        assert "sleep 100" not in box.exec(["ps", "-eo", "args"], 10).output
        # output is capped to head + tail
        flood = box.exec(
            ["sh", "-c", "echo START; head -c 500000 /dev/zero | tr '\\0' x; echo; echo END"], 20, max_output=2000
        )
        assert flood.output.startswith("START") and flood.output.rstrip().endswith("END")
        assert "bytes truncated" in flood.output and len(flood.output) < 2200
        # copy out: regular files only, size-capped
        assert box.copy_out("/repo/data.txt", max_bytes=100) == b"hello\n"
        assert box.copy_out("/repo/nothing", max_bytes=100) is None
        with pytest.raises(UnsafeArchiveError):
            box.copy_out("/repo/big.bin", max_bytes=1000)
        with pytest.raises(UnsafeArchiveError, match="symlink"):
            box.copy_out("/repo/link", max_bytes=100_000)
        state = box.state()
        assert state.running and not state.oom_killed
        assert len(_ours(docker_client)) == 1
    assert _ours(docker_client) == []  # leaving the block removed it
    box.remove()  # idempotent


@pytest.mark.docker
def test_docker_sandbox_wait_logs_attach_and_shared_loopback(docker_client, base_image):
    runtime = DockerRuntime(docker_client)
    script = "echo out; echo err >&2; python3 -m http.server 18765 --bind 127.0.0.1 >/dev/null 2>&1"
    with runtime.create(_spec(base_image, "svc", ["sh", "-c", script])) as service:
        chunks = service.attach(stdout=True)  # before start: nothing is missed
        service.start()
        with runtime.create(
            _spec(base_image, "tst", ["sleep", "300"], share_network_of=service, limits=SandboxLimits(pids_limit=64))
        ) as tester:
            tester.start()
            probe = tester.exec(
                [
                    "python3",
                    "-c",
                    "import time,urllib.request as u\n"
                    "for _ in range(50):\n"
                    "    try: print(u.urlopen('http://127.0.0.1:18765/').status); break\n"
                    "    except OSError: time.sleep(0.2)",
                ],
                30,
            )
            assert probe.output.strip() == "200"
            outside = tester.exec(["python3", "-c", "import socket; socket.create_connection(('1.1.1.1', 53), 3)"], 10)
            assert outside.exit_code != 0  # the pair has no network beyond the shared loopback
        assert service.logs(stdout=False).strip() == "err"
        assert service.logs(stderr=False).strip() == "out"
        service.exec(["pkill", "-f", "http.server"], 10)
        outcome = service.wait(30)
        assert not outcome.timed_out and outcome.exit_code is not None
        assert b"out" in b"".join(chunks)
    with runtime.create(_spec(base_image, "hang", ["sleep", "300"])) as hang:
        hang.start()
        started = time.monotonic()
        outcome = hang.wait(2)
        assert outcome.timed_out and time.monotonic() - started < 30
        assert not hang.state().running
    assert _ours(docker_client) == []
