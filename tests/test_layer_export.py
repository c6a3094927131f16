"""Dependency layers saved without `docker commit` (issue 12): the build's environment folder is
exported as one layer and loaded on top of the base; uv installs, and pip's rules have the last word.

Unit tests feed crafted archives to the exporter (the archive comes from a container that ran the
agent's requirements: nothing may leave the folder). Engine tests build real layers.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import time

import pytest

from bridge.scoring.images.base import ensure_base_image, image_exists
from bridge.scoring.images.sets import (
    LayerExportError,
    buildbox,
    ensure_deps_image,
    env_prefix,
    export_folder_layer,
    installed_pins,
    valid_prefix,
)
from tests import install_script_runner


def test_valid_prefix():
    assert valid_prefix("/opt/venv") and valid_prefix("/opt/tester")
    for bad in ("/", "/usr", "opt/venv", "/opt/../etc", "/opt/venv/", "/opt//venv", "/opt/./venv", ""):
        assert not valid_prefix(bad), bad


def test_installed_pins_read_uv_and_pip_output():
    log = (
        "RGBRIDGE_PREFIX=/opt/venv\n"
        " + six==1.16.0\n + pydantic-core==2.33.2\n"
        "Successfully installed certifi-2026.10.19.post1 pytest-json-report-1.5.0\n"
        " + ../evil==1\n  + not-a-pin\n"
    )
    assert installed_pins(log) == [
        "certifi==2026.10.19.post1",
        "pydantic-core==2.33.2",
        "pytest-json-report==1.5.0",
        "six==1.16.0",
    ]
    assert env_prefix(log) == "/opt/venv"
    # only the first line counts: the agent's code runs later and cannot name another folder
    assert env_prefix("something\nRGBRIDGE_PREFIX=/etc\n") == ""


class _FakeContainer:
    def __init__(self, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for info, data in members:
                if data is not None:
                    info.size = len(data)
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        self.data = buf.getvalue()

    def get_archive(self, path: str):
        return iter([self.data[i : i + 1000] for i in range(0, len(self.data), 1000)]), {}


def _dir(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    return info, None


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = 0o644
    return info, data


def test_export_passes_the_archive_through_and_replaces_the_folder(tmp_path):
    link = tarfile.TarInfo("opt/venv/bin/python")
    link.type, link.linkname = tarfile.SYMTYPE, "/usr/bin/python3"
    hard = tarfile.TarInfo("opt/venv/lib/copy.py")
    hard.type, hard.linkname = tarfile.LNKTYPE, "opt/venv/lib/mod.py"
    fake = _FakeContainer(
        [
            _dir("opt"),
            _dir("opt/venv"),
            _dir("opt/venv/lib"),
            _file("opt/venv/lib/mod.py", b"print(1)\n"),
            (link, None),
            (hard, None),
        ]
    )
    dest = tmp_path / "layer.tar"
    diff_id = export_folder_layer(fake, "/opt/venv", dest)  # type: ignore[arg-type]
    assert diff_id == "sha256:" + hashlib.sha256(dest.read_bytes()).hexdigest()
    assert dest.read_bytes().startswith(fake.data[:512])  # the archive's own bytes, unchanged
    with tarfile.open(dest) as tar:
        names = tar.getnames()
        assert names[0] == "opt" and names[-1] == "opt/.wh..wh..opq"
        assert "opt/venv/lib/mod.py" in names and tar.getmember("opt/venv/bin/python").linkname == "/usr/bin/python3"
        assert tar.getmember("opt/venv/lib/copy.py").linkname == "opt/venv/lib/mod.py"
        assert tar.extractfile("opt/venv/lib/mod.py").read() == b"print(1)\n"


@pytest.mark.parametrize(
    "members",
    [
        [_dir("opt"), _file("etc/passwd")],
        [_dir("opt"), _file("opt/venv/../../etc/passwd")],
        [_dir("optx"), _file("optx/a")],
        [_file("opt")],  # the folder is a file
        [],  # nothing at all
    ],
)
def test_export_refuses_members_outside_the_folder(tmp_path, members):
    with pytest.raises(LayerExportError):
        export_folder_layer(_FakeContainer(members), "/opt/venv", tmp_path / "l.tar")  # type: ignore[arg-type]


def test_export_refuses_links_out_and_devices(tmp_path):
    hard = tarfile.TarInfo("opt/x")
    hard.type, hard.linkname = tarfile.LNKTYPE, "etc/shadow"
    with pytest.raises(LayerExportError, match="hard link"):
        export_folder_layer(_FakeContainer([_dir("opt"), (hard, None)]), "/opt/venv", tmp_path / "a.tar")  # type: ignore[arg-type]
    dev = tarfile.TarInfo("opt/null")
    dev.type = tarfile.CHRTYPE
    with pytest.raises(LayerExportError, match="unsupported"):
        export_folder_layer(_FakeContainer([_dir("opt"), (dev, None)]), "/opt/venv", tmp_path / "b.tar")  # type: ignore[arg-type]


def test_export_is_size_capped(tmp_path, monkeypatch):
    monkeypatch.setenv("RGBRIDGE_MAX_LAYER_MB", str(64 / 1024))  # 64 KiB
    fake = _FakeContainer([_dir("opt"), _file("opt/big", b"\0" * 200_000)])
    with pytest.raises(LayerExportError, match="size cap"):
        export_folder_layer(fake, "/opt/venv", tmp_path / "l.tar")  # type: ignore[arg-type]


# ---------------------------------------------------------------- real engine


def _nonce(reqs: str) -> str:
    return f"{reqs}six>=0.0.{time.time_ns()}\n"


def _run(client, tag: str, script: str) -> str:
    out = client.containers.run(tag, ["sh", "-c", script], remove=True, network_mode="none")
    return out.decode()


def _forget(client, tag: str) -> None:
    if image_exists(client, tag):
        client.images.remove(tag, force=True)


@pytest.mark.docker
def test_layer_replaces_the_folder_so_removed_files_stay_removed(docker_client, index_needed):
    """pip replacing the base venv's setuptools removes its files; the exported layer hides them."""
    base = ensure_base_image(docker_client)
    before = _run(docker_client, base, "ls /opt/venv/lib/python3.11/site-packages | grep -i '^setuptools-'")
    assert before.strip()
    res = ensure_deps_image(docker_client, _nonce("setuptools==70.0.0\n"), timeout=300)
    try:
        assert "RGBRIDGE_SAVED=layer" in res.log_tail, res.log_tail
        layers = docker_client.images.get(res.tag).attrs["RootFS"]["Layers"]
        assert layers[:-1] == docker_client.images.get(base).attrs["RootFS"]["Layers"]
        after = _run(
            docker_client,
            res.tag,
            "ls /opt/venv/lib/python3.11/site-packages | grep -i '^setuptools-'; "
            "python -c 'import six, setuptools; print(setuptools.__version__)'; "
            "ls -ld /opt/venv /opt; id -un",
        )
        assert "setuptools-70.0.0.dist-info" in after and before.strip() not in after
        assert "\n70.0.0\n" in after
        assert after.strip().endswith("root")  # the base's user, not the build's
    finally:
        _forget(docker_client, res.tag)


@pytest.mark.docker
def test_requirements_uv_cannot_read_are_installed_by_pip(docker_client, index_needed):
    """pip accepts per-requirement options uv refuses (here: build six from source): the build says
    so and pip installs."""
    res = ensure_deps_image(docker_client, _nonce("six==1.16.0 --no-binary six\n"), timeout=300)
    try:
        assert "uv could not install" in res.log_tail and "installing with pip instead" in res.log_tail
        assert "RGBRIDGE_INSTALLER=pip" in res.log_tail
        assert "1.16.0" in _run(docker_client, res.tag, "python -c 'import six; print(six.__version__)'")
    finally:
        _forget(docker_client, res.tag)


@pytest.mark.docker
def test_what_pip_does_not_accept_is_rebuilt_by_pip(docker_client, index_needed, monkeypatch, wrong_uv):
    """An installer that picks another version than the requirements allow (a stand-in for any
    uv choice pip's rules reject): pip's dry run in the result disagrees, pip rebuilds the layer."""
    monkeypatch.setattr(buildbox, "uv_tool", lambda: wrong_uv)
    res = ensure_deps_image(docker_client, _nonce("six==1.16.0\n"), timeout=300)
    try:
        assert "pip does not accept what uv installed" in res.log_tail, res.log_tail
        assert "installing with pip instead" in res.log_tail
        assert "1.16.0" in _run(docker_client, res.tag, "python -c 'import six; print(six.__version__)'")
    finally:
        _forget(docker_client, res.tag)


def test_layer_script_keeps_pip_semantics_in_its_uv_flags(tmp_path):
    run = install_script_runner.run(tmp_path / "a", ["requirements.txt", "extras.txt"], mode="index")
    assert run.returncode == 0, run.lines
    installs = run.having("STUB uv pip install")
    assert len(installs) == 2 and all("--index-strategy unsafe-best-match" in x for x in installs)  # as pip does
    assert "requirements.txt" in installs[0] and "extras.txt" in installs[1]  # requirements first, then extras
    assert len(run.having("pip install --dry-run")) == 1  # pip checks all the steps at the end
    output = [line for line in run.lines if not line.startswith("STUB ")]
    assert output[0].startswith("RGBRIDGE_PREFIX=")  # before anything of the agent's runs
    pip = install_script_runner.run(tmp_path / "b", ["requirements.txt"], mode="pip")
    assert pip.returncode == 0 and pip.having(f"-m pip install -r {pip.build_dir}/requirements.txt")
    assert pip.having("RGBRIDGE_INSTALLER=pip") and not pip.having("STUB uv")
    local = install_script_runner.run(tmp_path / "c", ["requirements.txt"], mode="local")
    assert local.returncode == 0 and len(local.having("install --no-index")) == 1 and not local.having("STUB uv")
