"""demo/run_demo.py starts the bridge's MCP server with the caller's environment (issue 41): the
MCP client's default hands a server only HOME, PATH and a few more, so DOCKER_HOST and the
bridge's settings (a cache folder, an image salt, a disk budget) never reached its scoring."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from mcp.client.stdio import get_default_environment

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_the_demo_server_gets_the_callers_environment(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("run_demo", REPO_ROOT / "demo" / "run_demo.py")
    assert spec is not None and spec.loader is not None
    run_demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_demo)
    monkeypatch.setenv("RGBRIDGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/elsewhere.sock")
    args = argparse.Namespace(profile="strict", tasks=None)
    params = run_demo.server_params(args, tmp_path / "ws", tmp_path / "rec")
    env = params.env if params.env is not None else get_default_environment()  # what stdio_client does
    assert env["RGBRIDGE_CACHE"] == str(tmp_path / "cache")
    assert env["DOCKER_HOST"] == "unix:///run/elsewhere.sock"
    assert params.args[:2] == ["-m", "mcp_server"] and "--profile" in params.args
