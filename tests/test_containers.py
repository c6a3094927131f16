"""Container primitives on the real engine: isolation, limits, timeouts, logs, copies, sweeps."""

from __future__ import annotations

import os
import secrets
import subprocess
import tarfile
import time

import pytest
from docker.errors import NotFound

from bridge.errors import ScoringError
from bridge.scoring.run.sweep import sweep
from bridge.scoring.sandbox.archives import UnsafeArchiveError, build_directory_tar
from bridge.scoring.sandbox.capture import HeadTail, strip_ansi
from bridge.scoring.sandbox.containers import (
    create_container,
    exec_with_timeout,
    fetch_file,
    managed,
    put_directory,
    read_logs,
    wait_with_timeout,
)
from bridge.scoring.sandbox.docker_client import LABEL_RUN, make_labels
from bridge.scoring.sandbox.protocol import SandboxLimits

RUN = f"test-{secrets.token_hex(3)}"


def _name(what: str) -> str:
    return f"rgbridge-t-{RUN}-{what}-{secrets.token_hex(2)}"


def _make(client, image, what, command, **kw):
    return create_container(
        client, image, name=_name(what), command=command, labels=make_labels(kind="test", run_id=RUN), **kw
    )


def _run(client, image, script, *, seconds=60, limits=None):
    c = _make(client, image, "run", ["sh", "-c", script], limits=limits or SandboxLimits())
    with managed(c):
        c.start()
        outcome = wait_with_timeout(c, seconds)
        return outcome, read_logs(c)


# ---------------------------------------------------------------- no engine


def test_head_tail_keeps_both_ends():
    buf = HeadTail(100)
    for i in range(1000):
        buf.add(f"{i:05d}\n".encode())
    text = buf.text()
    assert text.startswith("00000\n") and text.endswith("00999\n")
    assert "bytes truncated" in text and len(text) < 200
    small = HeadTail(100)
    small.add(b"abc")
    assert small.text() == "abc"


def test_strip_ansi():
    assert strip_ansi("\x1b[31mred\x1b[0m \x1b]0;title\x07ok") == "red ok"


def test_directory_tar_normalises_and_keeps_links(tmp_path):
    (tmp_path / "start.sh").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "start.sh").chmod(0o755)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "a.pyc").write_bytes(b"junk")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    os.symlink("/etc/passwd", tmp_path / "escape")
    os.symlink(tmp_path / "pkg", tmp_path / "dirlink")
    with tarfile.open(fileobj=build_directory_tar(tmp_path, "/repo")) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {"repo", "repo/start.sh", "repo/pkg", "repo/pkg/a.py", "repo/escape", "repo/dirlink"}
    assert members["repo/start.sh"].mode == 0o755
    assert members["repo/escape"].issym() and members["repo/escape"].linkname == "/etc/passwd"
    assert members["repo/dirlink"].issym()
    assert all(m.uid == 10001 and m.gid == 10001 for m in members.values())
    assert len({m.mtime for m in members.values()}) == 1


def test_directory_tar_rejects_bad_dest(tmp_path):
    with pytest.raises(ScoringError):
        build_directory_tar(tmp_path, "relative/dir")
    with pytest.raises(ScoringError):
        build_directory_tar(tmp_path, "/repo/../etc")


# ---------------------------------------------------------------- engine


@pytest.mark.docker
def test_security_profile_inside_container(docker_client, base_image):
    outcome, out = _run(
        docker_client,
        base_image,
        "id -u; id -g; grep CapEff /proc/self/status; ls /sys/class/net; "
        "echo ROUTES; tail -n +2 /proc/net/route; echo END; "
        "grep NoNewPrivs /proc/self/status",
    )
    assert outcome.exit_code == 0, out
    lines = out.splitlines()
    assert lines[0] == "10001" and lines[1] == "10001"
    assert lines[2].split() == ["CapEff:", "0000000000000000"]
    assert lines[3].split() == ["lo"]
    assert out.split("ROUTES\n", 1)[1].startswith("END")
    assert "NoNewPrivs:\t1" in out


@pytest.mark.docker
def test_tester_reaches_service_over_shared_loopback(docker_client, base_image):
    service = _make(
        docker_client,
        base_image,
        "svc",
        ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/repo"],
    )
    with managed(service):
        service.start()
        tester = _make(
            docker_client,
            base_image,
            "tester",
            [
                "sh",
                "-c",
                "for i in $(seq 50); do curl -sf -o /dev/null "
                "http://localhost:8000/ && echo REACHED && exit 0; sleep 0.2; done; "
                "exit 7",
            ],
            network_mode=f"container:{service.id}",
        )
        with managed(tester):
            tester.start()
            outcome = wait_with_timeout(tester, 30)
            assert outcome.exit_code == 0, read_logs(tester)
            assert "REACHED" in read_logs(tester)
        # still no way out of the pair: only loopback in the shared namespace
        res = exec_with_timeout(service, ["ls", "/sys/class/net"], 10)
        assert res.output.split() == ["lo"]


@pytest.mark.docker
def test_fork_bomb_is_contained(docker_client, base_image):
    limits = SandboxLimits(pids_limit=64)
    counter = (
        "import os, time\nn = 0\ntry:\n    while True:\n        pid = os.fork()\n"
        "        if pid == 0:\n            time.sleep(30); os._exit(0)\n        n += 1\n"
        "except OSError as e:\n    print('BLOCKED', n, flush=True)\n"
    )
    outcome, out = _run(docker_client, base_image, f'python3 -c "{counter}"', seconds=30, limits=limits)
    assert "BLOCKED" in out, out
    assert int(out.split("BLOCKED")[1].split()[0]) < 64
    started = time.monotonic()
    outcome, _ = _run(docker_client, base_image, "bomb() { bomb | bomb & }; bomb; sleep 60", seconds=4, limits=limits)
    # Contained either way: killed at the wall-clock limit, or the shell gave up when fork failed.
    assert (outcome.timed_out or outcome.exit_code not in (0, None)) and time.monotonic() - started < 40
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork


@pytest.mark.docker
def test_memory_hog_is_oom_killed(docker_client, base_image):
    hog = "python3 -c \"x = []\nwhile len(x) < 300: x.append(b'x' * (10 * 1024 * 1024))\""
    outcome, out = _run(docker_client, base_image, hog, seconds=60, limits=SandboxLimits(mem_limit="256m"))
    assert outcome.oom_killed, (outcome, out)
    assert outcome.exit_code == 137 and not outcome.timed_out


@pytest.mark.docker
def test_wait_with_timeout_kills(docker_client, base_image):
    c = _make(docker_client, base_image, "sleep", ["sleep", "1000"])
    with managed(c):
        c.start()
        started = time.monotonic()
        outcome = wait_with_timeout(c, 2)
        elapsed = time.monotonic() - started
        assert outcome.timed_out and not outcome.oom_killed
        assert outcome.exit_code is not None and outcome.exit_code != 0
        assert 1.5 < elapsed < 20
        c.reload()
        assert c.status == "exited"


@pytest.mark.docker
def test_wait_reports_exit_code(docker_client, base_image):
    outcome, out = _run(docker_client, base_image, "echo done; exit 3")
    assert outcome == type(outcome)(exit_code=3, timed_out=False, oom_killed=False)
    assert out.strip() == "done"


@pytest.mark.docker
def test_read_logs_caps_huge_output(docker_client, base_image):
    script = (
        "python3 -c \"import sys; sys.stdout.write('\\x1b[32mSTART\\x1b[0m\\n'); "
        "sys.stdout.write(('y' * 1023 + '\\n') * 51200); sys.stdout.write('LAST\\n')\""
    )
    c = _make(docker_client, base_image, "logs", ["sh", "-c", script])
    with managed(c):
        c.start()
        assert wait_with_timeout(c, 120).exit_code == 0
        text = read_logs(c, cap_bytes=1_000_000)
    assert len(text) < 1_100_000
    assert text.startswith("START\n") and text.endswith("LAST\n")
    assert "bytes truncated ...]" in text


@pytest.mark.docker
def test_exec_with_timeout(docker_client, base_image):
    c = _make(docker_client, base_image, "exec", ["sleep", "300"])
    with managed(c):
        c.start()
        ok = exec_with_timeout(c, ["sh", "-c", "echo hi; id -u"], 10)
        assert ok.exit_code == 0 and ok.output.split() == ["hi", "10001"] and not ok.timed_out
        fail = exec_with_timeout(c, ["sh", "-c", "echo err >&2; exit 3"], 10)
        assert fail.exit_code == 3 and "err" in fail.output and not fail.timed_out
        root = exec_with_timeout(c, ["id", "-u"], 10, user="0:0", workdir="/tmp", env={"X": "1"})
        assert root.output.strip() == "0"
        started = time.monotonic()
        slow = exec_with_timeout(c, ["sh", "-c", "sleep 100"], 2)
        assert slow.timed_out and slow.exit_code == 124
        assert time.monotonic() - started < 15


@pytest.mark.docker
def test_put_directory_and_fetch_file(docker_client, base_image, tmp_path):
    src = tmp_path / "snap"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "start.sh").write_text("#!/bin/sh\necho started\n")
    (src / "bin" / "start.sh").chmod(0o755)
    (src / "data.txt").write_text("hello\n")
    (src / "big.bin").write_bytes(b"0" * 200_000)
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "x.pyc").write_bytes(b"junk")
    os.symlink("/etc/passwd", src / "passwd-link")
    c = _make(docker_client, base_image, "copy", ["sleep", "120"])
    with managed(c):
        put_directory(c, src, "/repo")
        put_directory(c, src, "/srv/new/place")  # destination not in the image
        c.start()
        res = exec_with_timeout(
            c,
            [
                "sh",
                "-c",
                "/repo/bin/start.sh; stat -c '%u:%g %a %n' /repo "
                "/repo/data.txt /srv/new/place/bin/start.sh; "
                "readlink /repo/passwd-link; ls -a /repo",
            ],
            10,
        )
        assert res.exit_code == 0, res.output
        assert "started" in res.output
        assert "10001:10001 755 /repo\n" in res.output
        assert "10001:10001 755 /srv/new/place/bin/start.sh" in res.output
        assert "/etc/passwd" in res.output and "__pycache__" not in res.output
        assert fetch_file(c, "/repo/data.txt", max_bytes=1000) == b"hello\n"
        assert fetch_file(c, "/repo/missing.txt", max_bytes=1000) is None
        with pytest.raises(UnsafeArchiveError, match="symlink"):
            fetch_file(c, "/repo/passwd-link", max_bytes=100_000)
        with pytest.raises(UnsafeArchiveError):
            fetch_file(c, "/repo/bin", max_bytes=100_000)  # a directory
        with pytest.raises(UnsafeArchiveError):
            fetch_file(c, "/repo/big.bin", max_bytes=1000)


@pytest.mark.docker
def test_create_replaces_ghost_and_refuses_missing_image(docker_client, base_image):
    name = _name("ghost")
    first = create_container(
        docker_client, base_image, name=name, command=["true"], labels=make_labels(kind="test", run_id=RUN)
    )
    second = create_container(
        docker_client, base_image, name=name, command=["true"], labels=make_labels(kind="test", run_id=RUN)
    )
    with managed(second):
        assert second.id != first.id and second.name == name
        with pytest.raises(NotFound):
            docker_client.containers.get(first.id)
    with pytest.raises(ScoringError, match="not found locally"):
        create_container(docker_client, "rgbridge-base:doesnotexist", name=_name("x"), command=["true"], labels={})


@pytest.mark.docker
def test_sweep_removes_labelled_leftovers(docker_client, base_image):
    run_a, run_b = f"{RUN}-a", f"{RUN}-b"
    left = [
        create_container(
            docker_client,
            base_image,
            name=_name(f"sw{i}"),
            command=["sleep", "60"],
            labels=make_labels(kind="test", run_id=run_a),
        )
        for i in range(2)
    ]
    left[0].start()
    other = create_container(
        docker_client, base_image, name=_name("other"), command=["true"], labels=make_labels(kind="test", run_id=run_b)
    )
    net = docker_client.networks.create(_name("net"), internal=True, labels=make_labels(kind="test", run_id=run_a))
    with managed(other):
        young = sweep(docker_client, run_id=run_a, older_than_seconds=3600)
        assert young.total == 0
        report = sweep(docker_client, run_id=run_a)
        assert sorted(report.containers) == sorted(c.name for c in left)
        assert report.networks == [net.name] and not report.errors
        remaining = docker_client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_a}"})
        assert remaining == []
        assert docker_client.containers.get(other.id)  # another run is untouched
