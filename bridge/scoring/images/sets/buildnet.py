"""One network namespace for the build containers that reach the package index.

A container on Docker's bridge network gets a namespace of its own at start (a veth pair,
addresses, firewall rules): on this project's machines about 0.13 s of every build container's
start, on the path of any score whose dependency set is new (docs/measurements.md). Build
containers instead join the namespace of one long-lived holder container
(``network_mode="container:<id>"``), which has the bridge network and runs nothing but
``sleep``. What a build can reach is unchanged (the bridge network, as before); what builds
share is the namespace itself, so concurrent builds could see each other's loopback sockets,
which nothing in a build listens on or connects to.

The holder carries our owner label but no run or process label: no run's sweep removes it, a
full ``cleanup`` does (it is made again on demand), and removing our images removes it first
(it keeps its image in use). Any failure to use it falls back to a namespace of the build's own.
"""

from __future__ import annotations

import contextlib

import docker
import requests
from docker.errors import DockerException, NotFound

from bridge.errors import ScoringError
from bridge.scoring.images.disk import HOLDER_KIND, HOLDER_NAME


def _running(client: docker.DockerClient) -> str | None:
    """The holder's id when it is running."""
    try:
        holder = client.containers.get(HOLDER_NAME)
    except (DockerException, requests.RequestException):
        return None
    return str(holder.id) if holder.status == "running" else None


def build_network(client: docker.DockerClient, image: str) -> str:
    """The network mode of a build container that reaches the index: the holder's namespace
    (the holder made from ``image`` when there is none running), else ``bridge``."""
    from bridge.scoring.images.base import build_lock
    from bridge.scoring.sandbox.containers import create_container, remove_container
    from bridge.scoring.sandbox.docker_client import make_labels
    from bridge.scoring.sandbox.protocol import SandboxLimits

    found = _running(client)
    if found is not None:
        return f"container:{found}"
    try:
        with build_lock(HOLDER_NAME):
            found = _running(client)
            if found is not None:
                return f"container:{found}"
            with contextlib.suppress(NotFound):
                remove_container(client.containers.get(HOLDER_NAME))  # stopped or dead
            holder = create_container(
                client,
                image,
                name=HOLDER_NAME,
                command=["sleep", "infinity"],
                labels=make_labels(kind=HOLDER_KIND),
                limits=SandboxLimits(
                    user="65534:65534", pids_limit=8, mem_limit="32m", nano_cpus=100_000_000, read_only=True
                ),
                network_mode="bridge",
            )
            try:
                if holder.name != HOLDER_NAME:  # the name was taken meanwhile: never a second holder
                    raise ScoringError(f"{HOLDER_NAME} is taken")
                holder.start()
            except BaseException:
                with contextlib.suppress(DockerException, requests.RequestException):
                    remove_container(holder)
                raise
            return f"container:{holder.id}"
    except (DockerException, requests.RequestException, OSError, ScoringError):
        return "bridge"
