"""Build containers that reach the index share one network namespace (images/sets/buildnet.py): its
holder is made on demand and again when gone, carries no run or process label, and any failure
to join it gives the build a namespace of its own. Real engine."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from docker.errors import NotFound

from bridge.scoring.images.disk import HOLDER_KIND, HOLDER_NAME, remove_holder, remove_images
from bridge.scoring.images.sets import buildbox, buildnet
from bridge.scoring.sandbox.containers import remove_container


def _network(container) -> str:
    container.reload()
    return str(container.attrs["HostConfig"]["NetworkMode"])


@contextlib.contextmanager
def _build(client, base: str, tmp_path: Path, mode: str = "index"):
    view = tmp_path / "view"
    view.mkdir(exist_ok=True)
    container, _mark = buildbox.start_build_container(
        client,
        base=base,
        kind="deps",
        requirement_files={"requirements.txt": "\n"},
        mode=mode,
        view=view,
        wheels=None,
        command=["bash", "-c", "sleep 30"],
    )
    try:
        yield container
    finally:
        remove_container(container)


def test_build_containers_join_the_holders_namespace(docker_client, base_image, tmp_path) -> None:
    with _build(docker_client, base_image, tmp_path) as first, _build(docker_client, base_image, tmp_path) as second:
        holder = docker_client.containers.get(HOLDER_NAME)
        assert holder.status == "running"
        assert _network(first) == _network(second) == f"container:{holder.id}"
        labels = holder.labels
        assert labels["rgbridge.owner"] == "rgbridge" and labels["rgbridge.kind"] == HOLDER_KIND
        # no run's sweep and no process's exit removes it
        assert "rgbridge.run_id" not in labels and "rgbridge.pid" not in labels
        assert holder.attrs["HostConfig"]["NetworkMode"] == "bridge"
        assert holder.attrs["HostConfig"]["ReadonlyRootfs"] is True
        assert holder.attrs["HostConfig"]["CapDrop"] == ["ALL"]


def test_a_local_build_has_no_network(docker_client, base_image, tmp_path) -> None:
    with _build(docker_client, base_image, tmp_path, mode="local") as build:
        assert _network(build) == "none"


def test_a_removed_or_stopped_holder_is_made_again(docker_client, base_image) -> None:
    first = buildnet.build_network(docker_client, base_image)
    assert remove_holder(docker_client)
    second = buildnet.build_network(docker_client, base_image)
    assert second.startswith("container:") and second != first
    docker_client.containers.get(HOLDER_NAME).stop(timeout=1)
    third = buildnet.build_network(docker_client, base_image)
    assert third.startswith("container:") and third != second
    assert docker_client.containers.get(HOLDER_NAME).status == "running"


def test_a_holder_gone_before_the_build_starts_leaves_the_build_its_own_namespace(
    docker_client, base_image, tmp_path, monkeypatch
) -> None:
    gone = buildnet.build_network(docker_client, base_image)
    remove_holder(docker_client)
    monkeypatch.setattr(buildbox, "build_network", lambda _client, _image: gone)
    with _build(docker_client, base_image, tmp_path) as build:
        assert _network(build) == "bridge"
        assert build.status == "running"  # reloaded by _network


def test_removing_our_images_removes_the_holder_first(docker_client, base_image) -> None:
    buildnet.build_network(docker_client, base_image)
    remove_images(docker_client, kinds=["no-such-kind"])
    with pytest.raises(NotFound):
        docker_client.containers.get(HOLDER_NAME)
