"""One attempt's network, opened after its MCP server is up and closed once its agent is gone:
the doors (the attempt's MCP server, and whatever else the run names, e.g. the model gateway),
the allow-list proxy under `--network allow`, the Confinement they go into, the variables the
agent's environment gains, and what the proxy saw (the row's `hosts_asked`, the recording's
`network_request` events). Under `--network host` nothing is opened."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bridge.agents.confine.model import Confinement
from bridge.agents.confine.network import Doors, isolated
from bridge.agents.confine.proxy import AllowProxy, proxy_env
from bridge.fs.files import write_json_atomic


def loopback_port(url: str) -> int:
    """The port of an endpoint on the host's 127.0.0.1 (a door's target); ValueError otherwise."""
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost") or parts.port is None:
        raise ValueError(f"{url}: a door leads to 127.0.0.1:PORT only")
    return parts.port


def endpoints_for(mcp_url: str, model_url: str | None) -> dict[str, int]:
    """The doors of one attempt: its MCP server, and the model endpoint the agent is given when
    it is on this host's loopback: the model gateway's URL (issue 38, part A), else a
    `--model-base-url` of the user's own (a local model server, a test's scripted one). A model
    host elsewhere gets no door: the agent reaches it through the gateway only."""
    doors = {"mcp": loopback_port(mcp_url)}
    if model_url:
        with contextlib.suppress(ValueError):
            doors["model"] = loopback_port(model_url)
    return doors


class AttemptNetwork:
    """Use as a context manager around the agent's run: every door and the proxy close on exit."""

    def __init__(self, mode: str, allowed: Iterable[str] = (), endpoints: Mapping[str, int] | None = None) -> None:
        self.mode = mode
        self.allowed = tuple(allowed)
        self.doors: Doors | None = None
        self.proxy: AllowProxy | None = None
        self.env: dict[str, str] = {}
        if not isolated(mode):
            return
        self.doors = Doors()
        try:
            for name, port in (endpoints or {}).items():
                self.doors.open(name, port)
            if mode == "allow":
                self.proxy = AllowProxy(self.allowed)
                self.doors.open("proxy", self.proxy.port)
                self.env = proxy_env(self.proxy.port)
        except BaseException:
            self.close()
            raise

    def confine(self, confinement: Confinement) -> Confinement:
        doors = tuple(self.doors.doors) if self.doors is not None else ()
        return dataclasses.replace(confinement, network=self.mode, doors=doors)

    def asked(self) -> list[dict[str, Any]]:
        """Every request the proxy saw, in order (empty but under `allow`)."""
        return self.proxy.log() if self.proxy is not None else []

    def summary(self) -> dict[str, Any]:
        """The row's view: the mode, the allowed names, each host asked for once with its verdict."""
        hosts: dict[str, bool] = {}
        for ask in self.asked():
            hosts[f"{ask['host']}:{ask['port']}"] = bool(ask["allowed"])
        return {
            "mode": self.mode,
            "allowed_hosts": sorted(self.allowed),
            "hosts_asked": [{"host": h, "allowed": ok} for h, ok in sorted(hosts.items())],
        }

    def keep(self, path: Path) -> dict[str, Any]:
        """Write what the attempt's network was and saw (`agent/network.json`); the row's summary."""
        summary = self.summary()
        write_json_atomic(path, {**summary, "asked": self.asked()})
        return summary

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        if self.doors is not None:
            self.doors.close()

    def __enter__(self) -> AttemptNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def network_log(path: Path) -> list[dict[str, Any]]:
    """The proxy's log an attempt kept (`keep`), [] when there is none: the recording's
    `network_request` events."""
    try:
        found = json.loads(path.read_text(encoding="utf-8")).get("asked", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [a for a in found if isinstance(a, dict)] if isinstance(found, list) else []
