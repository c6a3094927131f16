"""Sweeping the bridge's labelled Docker objects: containers and networks of one run (or all, or
only old ones), and the bridge's images when asked. Every object the bridge creates carries the
owner label (bridge/scoring/sandbox/docker_client.py), so nothing else on the engine is touched.
"""

from __future__ import annotations

import datetime as _dt
import re
import time
from dataclasses import dataclass, field
from typing import Any

import docker
import requests
from docker.errors import DockerException, NotFound

from bridge.scoring.images.disk import remove_images
from bridge.scoring.sandbox.containers import remove_container
from bridge.scoring.sandbox.docker_client import LABEL_RUN, owner_filter


@dataclass
class SweepReport:
    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.containers) + len(self.networks) + len(self.images)


def _age_seconds(created: str | int | None) -> float | None:
    if created is None:
        return None
    if isinstance(created, (int, float)):
        return time.time() - float(created)
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?", created)
    if not m:
        return None
    frac = (m.group(2) or ".0")[:7]
    tz = m.group(3) or "Z"
    stamp = _dt.datetime.fromisoformat(m.group(1) + frac + ("+00:00" if tz == "Z" else tz))
    return time.time() - stamp.timestamp()


def sweep(
    client: docker.DockerClient,
    *,
    run_id: str | None = None,
    older_than_seconds: float | None = None,
    include_images: bool = False,
) -> SweepReport:
    """Remove our labelled containers and networks (one run's, or all; optionally only the
    old ones), and our images when asked. Errors are collected, never raised."""
    report = SweepReport()
    filters = [owner_filter()] + ([f"{LABEL_RUN}={run_id}"] if run_id else [])

    def old_enough(created: Any) -> bool:
        if older_than_seconds is None:
            return True
        age = _age_seconds(created)
        return age is not None and age >= older_than_seconds

    try:
        for c in client.containers.list(all=True, filters={"label": filters}):
            if not old_enough(c.attrs.get("Created")):
                continue
            try:
                remove_container(c)
                report.containers.append(c.name)
            except DockerException as exc:
                report.errors.append(f"container {c.name}: {exc}")
        for n in client.networks.list(filters={"label": filters}):
            if not old_enough(n.attrs.get("Created")):
                continue
            try:
                n.remove()
                report.networks.append(n.name)
            except NotFound:
                pass
            except DockerException as exc:
                report.errors.append(f"network {n.name}: {exc}")
        if include_images:
            report.images.extend(remove_images(client))
    except (DockerException, requests.RequestException) as exc:
        report.errors.append(f"engine: {exc}")
    return report
