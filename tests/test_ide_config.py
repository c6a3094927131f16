"""`rgbridge ide-config`: each IDE's format, merging, refusal of unparsable files."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from bridge.cli import main as rgbridge
from bridge.credentials import mint_client_credential, verify_client_token
from mcp_server.ide_config import ConfigError, config_path, merge_into, server_entry

EXPECTED_FILES = {
    "cursor": (False, ".cursor/mcp.json", "mcpServers"),
    "vscode": (False, ".vscode/mcp.json", "servers"),
    "claude": (False, ".mcp.json", "mcpServers"),
    "antigravity": (True, ".gemini/config/mcp_config.json", "mcpServers"),
    "windsurf": (True, ".codeium/windsurf/mcp_config.json", "mcpServers"),
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("RGBRIDGE_TOKEN", raising=False)
    return home


@pytest.mark.parametrize("ide", sorted(EXPECTED_FILES))
def test_write_each_ide_stdio(ide: str, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / "ws"
    tasks = tmp_path / "mytasks"
    assert (
        rgbridge(
            ["ide-config", ide, "--workspace", str(ws), "--write", "--task-dir", str(tasks), "--profile", "strict"]
        )
        == 0
    )
    in_home, rel, top = EXPECTED_FILES[ide]
    path = (home if in_home else ws) / rel
    doc = json.loads(path.read_text())
    entry = doc[top]["rgbridge"]
    assert entry["command"] == sys.executable and Path(entry["command"]).is_absolute()
    assert entry["args"] == [
        "-m",
        "mcp_server",
        "--workspace",
        str(ws.absolute()),
        "--task-dir",
        str(tasks.absolute()),
        "--profile",
        "strict",
    ]
    if ide in ("vscode", "claude"):
        assert entry["type"] == "stdio"
    else:
        assert "type" not in entry
    assert capsys.readouterr().out == ""  # --write prints nothing on stdout


@pytest.mark.parametrize(
    "ide,url_key,typed",
    [
        ("cursor", "url", False),
        ("vscode", "url", True),
        ("claude", "url", True),
        ("antigravity", "serverUrl", False),
        ("windsurf", "serverUrl", False),
    ],
)
def test_print_http_with_token(
    ide: str, url_key: str, typed: bool, home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        rgbridge(
            [
                "ide-config",
                ide,
                "--workspace",
                str(tmp_path / "ws"),
                "--transport",
                "http",
                "--url",
                "http://127.0.0.1:9999/mcp",
                "--token",
                "t" * 43,
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    top = EXPECTED_FILES[ide][2]
    entry = doc[top]["rgbridge"]
    assert entry[url_key] == "http://127.0.0.1:9999/mcp"
    ((scheme, credential),) = [entry["headers"]["Authorization"].split(" ")]
    assert scheme == "Bearer" and verify_client_token(
        "t" * 43, credential
    )  # its own credential, not the server's token
    assert ("type" in entry) == typed and entry.get("type", "http") == "http"
    assert "command" not in entry
    assert not (tmp_path / "ws").exists()  # printing writes nothing


def test_http_token_read_from_recordings(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "http-token").write_text("from-file-token-0123456789\n")
    assert (
        rgbridge(
            ["ide-config", "cursor", "--workspace", str(tmp_path), "--transport", "http", "--recordings", str(rec)]
        )
        == 0
    )
    entry = json.loads(capsys.readouterr().out)["mcpServers"]["rgbridge"]
    assert verify_client_token("from-file-token-0123456789", entry["headers"]["Authorization"].removeprefix("Bearer "))
    assert entry["url"] == "http://127.0.0.1:8765/mcp"


def test_merge_keeps_other_servers_and_keys(home: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    path = ws / ".vscode" / "mcp.json"
    path.parent.mkdir(parents=True)
    original = {
        "inputs": [{"id": "k", "type": "promptString"}],
        "servers": {"other": {"type": "stdio", "command": "x"}, "rgbridge": {"type": "stdio", "command": "old"}},
    }
    path.write_text(json.dumps(original))
    assert rgbridge(["ide-config", "vscode", "--workspace", str(ws), "--write"]) == 0
    doc = json.loads(path.read_text())
    assert doc["inputs"] == original["inputs"]
    assert doc["servers"]["other"] == {"type": "stdio", "command": "x"}
    assert doc["servers"]["rgbridge"]["command"] == sys.executable
    assert json.loads((path.parent / "mcp.json.bak").read_text()) == original
    # Idempotent: a second write gives the same document.
    assert rgbridge(["ide-config", "vscode", "--workspace", str(ws), "--write"]) == 0
    assert json.loads(path.read_text()) == doc


def test_invalid_json_is_refused_untouched(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = home / ".codeium" / "windsurf" / "mcp_config.json"
    path.parent.mkdir(parents=True)
    broken = '{"mcpServers": {"a": 1,, }'
    path.write_text(broken)
    assert rgbridge(["ide-config", "windsurf", "--workspace", str(tmp_path / "ws"), "--write"]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert path.read_text() == broken
    assert not (path.parent / "mcp_config.json.bak").exists()


@pytest.mark.parametrize(
    "content,match", [("[1, 2]", "not a JSON object"), ('{"mcpServers": []}', "'mcpServers' is not")]
)
def test_wrong_shapes_are_refused(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=match):
        merge_into(path, "cursor", {"command": "x"})
    assert path.read_text() == content


def test_empty_file_is_filled(tmp_path: Path) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text("")
    merge_into(path, "claude", server_entry("claude", tmp_path))
    assert json.loads(path.read_text())["mcpServers"]["rgbridge"]["type"] == "stdio"


def test_new_file_with_token_is_private(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "mcp.json"
    merge_into(path, "cursor", server_entry("cursor", tmp_path, transport="http", token="x" * 20))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_home_relative_paths_follow_home(home: Path, tmp_path: Path) -> None:
    assert config_path("antigravity", tmp_path) == home / ".gemini" / "config" / "mcp_config.json"
    assert config_path("windsurf", tmp_path) == home / ".codeium" / "windsurf" / "mcp_config.json"
    assert config_path("cursor", tmp_path) == tmp_path.absolute() / ".cursor" / "mcp.json"


def test_unexpanded_workspace_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unexpanded"):
        server_entry("cursor", Path("${workspaceFolder}"))


def test_generated_stdio_config_launches_a_working_server(home: Path, tmp_path: Path) -> None:
    """Smoke-test the generated entry the way an IDE would: spawn it and list the tools."""
    import anyio
    from mcp import Client, StdioServerParameters, stdio_client

    entry = server_entry("claude", tmp_path / "ws", extra_args=["--recordings", str(tmp_path / "rec")])

    async def go() -> list[str]:
        params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=str(home))
        with (tmp_path / "server.stderr").open("w") as errlog:  # pytest's captured stderr has no fileno
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                return sorted(t.name for t in (await client.list_tools()).tools)

    names = anyio.run(go)
    assert "start_task" in names and len(names) == 10


# --------------------------------------------------------------------------- issue 8, opening 8(e)
TOKEN = "secret-token-" + "k" * 30
REFERENCES = {"cursor": "${env:RGBRIDGE_TOKEN}", "claude": "${RGBRIDGE_TOKEN}", "vscode": "${input:rgbridge-token}"}


def files_holding(folder: Path, needle: str) -> list[Path]:
    """Files holding `needle`, or (for the server's token) any credential minted from it."""
    if needle == TOKEN:
        return [
            p
            for p in folder.rglob("*")
            if p.is_file() and (needle.encode() in p.read_bytes() or b"rgbc1." in p.read_bytes())
        ]
    return [p for p in folder.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.mark.parametrize("ide", sorted(EXPECTED_FILES))
def test_http_write_never_puts_the_token_in_the_workspace(ide: str, home: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert (
        rgbridge(["ide-config", ide, "--workspace", str(ws), "--transport", "http", "--token", TOKEN, "--write"]) == 0
    )
    assert files_holding(ws, TOKEN) == []
    in_home, rel, top = EXPECTED_FILES[ide]
    path = (home if in_home else ws) / rel
    entry = json.loads(path.read_text())[top]["rgbridge"]
    auth = entry["headers"]["Authorization"]
    if in_home:  # outside the workspace: the config's own credential, in a private file
        assert verify_client_token(TOKEN, auth.removeprefix("Bearer ")) and stat.S_IMODE(path.stat().st_mode) == 0o600
    else:
        assert auth == f"Bearer {REFERENCES[ide]}"
    if ide == "vscode":
        (inp,) = json.loads(path.read_text())["inputs"]
        assert inp["id"] == "rgbridge-token" and inp["password"] is True


def test_existing_token_file_in_workspace_is_cleaned_and_private(home: Path, tmp_path: Path) -> None:
    """An older version wrote the token into the workspace's .mcp.json with mode 0644: rewriting
    it leaves no copy of the token in the workspace (not even the .bak) and fixes the mode."""
    ws = tmp_path / "ws"
    ws.mkdir()
    old = ws / ".mcp.json"
    old.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "rgbridge": {"type": "http", "url": "u", "headers": {"Authorization": f"Bearer {TOKEN}"}},
                    "other": {"command": "x"},
                }
            }
        )
    )
    old.chmod(0o644)
    assert (
        rgbridge(["ide-config", "claude", "--workspace", str(ws), "--transport", "http", "--token", TOKEN, "--write"])
        == 0
    )
    assert files_holding(ws, TOKEN) == []
    assert stat.S_IMODE(old.stat().st_mode) == 0o600
    backup = ws / ".mcp.json.bak"
    assert json.loads(backup.read_text())["mcpServers"]["other"] == {"command": "x"}
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600


def test_existing_home_config_mode_is_fixed(home: Path, tmp_path: Path) -> None:
    path = home / ".codeium" / "windsurf" / "mcp_config.json"
    path.parent.mkdir(parents=True)
    path.write_text("{}")
    path.chmod(0o644)
    assert (
        rgbridge(
            [
                "ide-config",
                "windsurf",
                "--workspace",
                str(tmp_path / "ws"),
                "--transport",
                "http",
                "--token",
                TOKEN,
                "--write",
            ]
        )
        == 0
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_antigravity_config_inside_workspace_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    monkeypatch.setenv("HOME", str(ws / "home"))  # the home config would land inside the workspace
    assert (
        rgbridge(
            ["ide-config", "antigravity", "--workspace", str(ws), "--transport", "http", "--token", TOKEN, "--write"]
        )
        == 2
    )
    assert "refusing to write the bearer token" in capsys.readouterr().err
    assert not ws.exists() or files_holding(ws, TOKEN) == []


def test_recorded_session_never_holds_the_token(home: Path, tmp_path: Path, tasks_dir: Path) -> None:
    from bridge.recording.store import ShadowStore
    from bridge.sessions.manager import SessionManager
    from bridge.sessions.settings import RecorderSettings, SessionSettings
    from bridge.tasks.catalog import Catalog
    from tests.helpers import CountingScorer

    mgr = SessionManager(
        Catalog.from_options(tasks_dir),
        recordings_dir=tmp_path / "rec",
        scorer=CountingScorer(),
        settings=SessionSettings(recorder=RecorderSettings(settle_seconds=0.05)),
    )
    try:
        st = mgr.start("kv-ledger", tmp_path / "ws")
        for ide in ("claude", "cursor", "vscode"):
            assert (
                rgbridge(
                    ["ide-config", ide, "--workspace", st.workspace, "--transport", "http", "--token", TOKEN, "--write"]
                )
                == 0
            )
        mgr.quit(st.session_id)
    finally:
        mgr.close()
    store = ShadowStore(Path(st.recording) / "store", Path(st.workspace))
    out = tmp_path / "checkout"
    store.checkout_to(store.head(), out)
    assert (out / ".mcp.json").is_file()  # recorded, but holding only the reference
    assert files_holding(out, TOKEN) == [] and files_holding(Path(st.recording), TOKEN) == []


# --------------------------------------------------------------------------- issue 20, item 5
def printed_credential(capsys: pytest.CaptureFixture[str], ide: str = "cursor") -> str:
    entry = json.loads(capsys.readouterr().out)[EXPECTED_FILES[ide][2]]["rgbridge"]
    return entry["headers"]["Authorization"].removeprefix("Bearer ")


def test_each_config_gets_its_own_stable_credential(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["ide-config", "cursor", "--transport", "http", "--token", TOKEN]
    assert rgbridge([*base, "--workspace", str(tmp_path / "a")]) == 0
    first = printed_credential(capsys)
    assert rgbridge([*base, "--workspace", str(tmp_path / "a")]) == 0
    assert printed_credential(capsys) == first  # written again: the same identity, its sessions still its own
    assert rgbridge([*base, "--workspace", str(tmp_path / "b")]) == 0
    other = printed_credential(capsys)
    assert other != first and verify_client_token(TOKEN, first) != verify_client_token(TOKEN, other)
    assert (
        rgbridge(["ide-config", "claude", "--transport", "http", "--token", TOKEN, "--workspace", str(tmp_path / "a")])
        == 0
    )
    assert printed_credential(capsys, "claude") != first  # another IDE on the same folder is another client
    given = mint_client_credential(TOKEN, "from-run").token
    assert (
        rgbridge(["ide-config", "cursor", "--transport", "http", "--token", given, "--workspace", str(tmp_path / "a")])
        == 0
    )
    assert printed_credential(capsys) == given  # a credential is used as it is, never minted from


def test_written_reference_tells_the_credential(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert (
        rgbridge(["ide-config", "claude", "--workspace", str(ws), "--transport", "http", "--token", TOKEN, "--write"])
        == 0
    )
    err = capsys.readouterr().err
    credential = err.strip().splitlines()[-1]
    assert verify_client_token(TOKEN, credential) and "RGBRIDGE_TOKEN" in err
    assert files_holding(ws, credential) == []


def test_serve_refuses_a_client_credential_as_its_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    credential = mint_client_credential(TOKEN).token
    assert (
        rgbridge(["serve", "--transport", "http", "--recordings", str(tmp_path), "--port", "1", "--token", credential])
        == 2
    )
    assert "client credential" in capsys.readouterr().err
    assert not (tmp_path / "http-token").exists()
