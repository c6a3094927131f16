"""CLI verbs contributed by the MCP adapter (`serve`, `ide-config`), via entry points.

`python -m mcp_server ...` is `rgbridge serve ...` (what generated IDE configs launch).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from bridge.commands.common import (
    PROFILE_CHOICES,
    RECORDINGS_HELP,
    TaskSource,
    add_task_source_options,
    at_least,
    old_spelling,
)
from bridge.commands.disk import add_disk_budget_option
from bridge.credentials import client_id_for, is_client_token, mint_client_credential, read_server_token
from bridge.errors import BridgeError
from bridge.locations import default_recordings_dir

DEFAULT_PORT = 8765


def _abs(path: Path | None) -> Path | None:
    return None if path is None else Path(os.path.abspath(os.path.expanduser(str(path))))


# --------------------------------------------------------------------------- serve
#: `serve --attempts N`, the submissions limit's old name (`rgbridge run --attempts` counts attempts)
OLD_ATTEMPTS = (
    "--attempts is deprecated here: use --max-submissions N (`rgbridge run --attempts` counts attempts per task)"
)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (default; what IDEs spawn) or streamable HTTP",
    )
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default 127.0.0.1)")
    parser.add_argument(
        "--port",
        type=at_least(0, 65535),
        default=DEFAULT_PORT,
        help=f"HTTP port (default {DEFAULT_PORT}; 0: a free port, announced once bound)",
    )
    parser.add_argument(
        "--token", default=None, help="HTTP bearer token (default: $RGBRIDGE_TOKEN, else a fresh random token)"
    )
    parser.add_argument("--allow-remote", action="store_true", help="allow a non-loopback HTTP bind (needs --token)")
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="extra Host header value accepted over HTTP (DNS-rebinding allow-list)",
    )
    parser.add_argument(
        "--workspace",
        type=Path,
        metavar="DIR",
        help="the workspace root sessions work in (default: $RGBRIDGE_WORKSPACE, $CLAUDE_PROJECT_DIR)",
    )
    add_task_source_options(parser)
    parser.add_argument(
        "--recordings",
        type=Path,
        metavar="DIR",
        help=RECORDINGS_HELP,
    )
    parser.add_argument("--profile", choices=PROFILE_CHOICES, default="both", help="scoring profile(s) (default both)")
    parser.add_argument("--practice", action="store_true", help="opt-in practice mode (recorded as such)")
    parser.add_argument(
        "--max-submissions",
        type=at_least(1),
        default=1,
        metavar="N",
        help="scored submissions allowed per task in this run (one server process; default 1); "
        "each is recorded as its own attempt",
    )
    # `--attempts` was this limit's name; in `rgbridge run` it means attempts per task
    parser.add_argument(
        "--attempts",
        type=at_least(1),
        dest="max_submissions",
        action=old_spelling(OLD_ATTEMPTS),
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--run-id",
        default=None,
        metavar="ID",
        help="name the agent run so attempts are counted across server restarts (sessions of this "
        "run id in the recordings folder count); default: a fresh run per process",
    )
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    # The attempt mode of `rgbridge run` (mcp_server/attempt_mode.py): the run starts the server,
    # the server opens the attempt's session and holds it for the agent.
    attempt = parser.add_argument_group("one attempt of `rgbridge run` (what the run passes)")
    attempt.add_argument(
        "--start-task",
        metavar="TASK",
        help="open a session of TASK in --workspace at start-up and serve it to one client over HTTP "
        "(a fresh server token, never written; the client's credential goes to --ready-file); the "
        "server ends on SIGTERM or at the end of its standard input",
    )
    attempt.add_argument("--client-name", metavar="NAME", help="the client recorded for that session")
    attempt.add_argument("--client-version", metavar="VERSION", help="its version")
    attempt.add_argument(
        "--ready-file",
        type=Path,
        metavar="FILE",
        help="written (mode 0600) once the session is open and the server listens: url, credential, session id",
    )
    add_disk_budget_option(parser)


def register_serve(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("serve", help="run the MCP server (stdio by default, or streamable HTTP)")
    add_serve_arguments(parser)
    parser.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    # Logging first, before anything can touch stdout (stdio: stdout is the protocol).
    from mcp_server.transport import bind_http, check_bind, configure_logging, listen_http, load_or_create_token

    configure_logging(args.log_level)
    from bridge.scoring.images.disk import apply_budget_option
    from mcp_server import attempt_mode

    attempt_mode.check_options(args)
    apply_budget_option(getattr(args, "disk_budget", None))
    token_given = args.token or os.environ.get("RGBRIDGE_TOKEN") or None
    sock = None
    port = args.port
    if args.transport == "http":
        check_bind(args.host, allow_remote=args.allow_remote, token_given=bool(token_given))
        sock = bind_http(args.host, args.port)  # before any announcement: a busy port is the first word
        port = sock.getsockname()[1]  # the one bound (--port 0: the kernel's choice)

    from bridge.sessions.linux import not_dumpable
    from bridge.sessions.manager import SessionManager
    from bridge.sessions.settings import SessionSettings
    from mcp_server.transport import Ended, end_on_signals, raise_if_ended, run_http, run_stdio

    # the server holds the golden files of its sessions' tasks in memory (README, "Threat model"):
    # other processes of the user may not read its memory or descriptors
    not_dumpable()

    catalog = TaskSource.from_args(args).catalog()
    for line in catalog.errors:
        print(f"rgbridge serve: warning: {line}", file=sys.stderr)
    recordings = _abs(args.recordings) or default_recordings_dir()
    manager = SessionManager(
        catalog,
        recordings_dir=recordings,
        settings=SessionSettings(
            profile=args.profile, practice=args.practice, attempts=args.max_submissions, run_id=args.run_id
        ),
    )
    ended: Ended | None = None
    end_on_signals()
    try:
        url = f"http://{'[' + args.host + ']' if ':' in args.host else args.host}:{port}/mcp"
        attempt = None
        if args.start_task:
            # The session is open and watched, and the socket listens, before the MCP SDK is even
            # imported: the agent starts (and queues its first connection) meanwhile.
            assert sock is not None
            token = attempt_mode.server_token(token_given)
            attempt = attempt_mode.open_attempt(args, manager, token)
            attempt_mode.end_with_stdin(signal.SIGTERM)
            listen_http(sock)
            attempt_mode.write_ready(args.ready_file, url, attempt)
        from mcp_server.server import build_server

        server = build_server(manager, default_workspace=_abs(args.workspace), owns_manager=True)
        raise_if_ended()  # a signal whose Ended was lost while the server was being built
        if args.transport == "stdio":
            run_stdio(server)
            return 0
        assert sock is not None
        if attempt is not None:
            attempt_mode.claim(server, attempt)
            print(f"rgbridge: serving session {attempt.session_id} at {url}", file=sys.stderr, flush=True)
        else:
            token, token_path = load_or_create_token(token_given, manager.recordings_dir)
            listen_http(sock)
            print(f"rgbridge: serving MCP at {url}", file=sys.stderr)
            print(f"rgbridge: bearer token (also in {token_path}, mode 0600): {token}", file=sys.stderr, flush=True)
        run_http(server, host=args.host, port=port, token=token, allowed_hosts=args.allowed_host, sock=sock)
        return 0
    except Ended as exc:
        ended = exc
        return 128 + exc.signum
    finally:
        if sock is not None:
            sock.close()
        manager.close()  # the server's lifespan has closed it, unless the server never ran
        running = manager.jobs_running()
        if running:
            print(
                f"rgbridge: finishing {running} scoring job(s) before exiting "
                "(interrupt to stop; an unfinished job resumes on the next start)",
                file=sys.stderr,
                flush=True,
            )
            manager.wait_jobs()
        if ended is not None:
            # the SDK's stdin reader thread stays blocked on a pipe the client keeps open: leave
            # without joining it, now that everything is closed
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + ended.signum)


# --------------------------------------------------------------------------- ide-config
def register_ide_config(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from mcp_server.ide_config import IDES

    parser = subparsers.add_parser("ide-config", help="print or write an IDE's MCP config for this bridge")
    parser.add_argument("ide", choices=IDES)
    parser.add_argument(
        "--workspace",
        type=Path,
        metavar="DIR",
        required=True,
        help="the task workspace (absolute path written into the config)",
    )
    parser.add_argument("--write", action="store_true", help="merge into the IDE's config file (keeps a .bak)")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--url", default=None, help="HTTP endpoint (default http://127.0.0.1:8765/mcp)")
    parser.add_argument(
        "--token",
        default=None,
        help="the HTTP server's bearer token this config's own client credential is minted from "
        "(default: $RGBRIDGE_TOKEN, else the token file in the recordings folder); a client "
        "credential (rgbc1...) is used as it is",
    )
    add_task_source_options(parser, passed_through=True)
    parser.add_argument(
        "--recordings", type=Path, metavar="DIR", help="passed through to the server; " + RECORDINGS_HELP
    )
    parser.add_argument("--profile", choices=PROFILE_CHOICES, default=None, help="passed through to the server")
    parser.add_argument("--practice", action="store_true", help="passed through to the server")
    parser.set_defaults(handler=cmd_ide_config)


def passthrough_args(args: argparse.Namespace) -> list[str]:
    extra = TaskSource.from_args(args).server_args()
    if getattr(args, "recordings", None) is not None:
        extra += ["--recordings", str(_abs(args.recordings))]
    if getattr(args, "profile", None):
        extra += ["--profile", args.profile]
    if getattr(args, "practice", False):
        extra.append("--practice")
    return extra


def _http_token(args: argparse.Namespace) -> str | None:
    """The server's token (--token, $RGBRIDGE_TOKEN, else the server's token file), or a client
    credential given instead."""
    token = args.token or os.environ.get("RGBRIDGE_TOKEN")
    if token:
        return str(token)
    return read_server_token(_abs(args.recordings) or default_recordings_dir())


def client_token(args: argparse.Namespace, workspace: Path) -> str | None:
    """The bearer token an HTTP config sends: this config's own client credential, minted from the
    server's token (bridge/credentials.py), so that its sessions are its own whatever protocol era
    the IDE speaks. The same IDE and workspace get the same credential each time; a credential
    given instead of the server's token is used as it is."""
    token = _http_token(args)
    if token is None or is_client_token(token):
        return token
    return mint_client_credential(token, client_id_for(f"{args.ide}\0{workspace}")).token


def cmd_ide_config(args: argparse.Namespace) -> int:
    from mcp_server.ide_config import (
        TOKEN_ENV,
        config_path,
        is_inside,
        merge_into,
        render_document,
        server_entry,
        token_reference,
        vscode_token_input,
    )

    workspace = _abs(args.workspace)
    assert workspace is not None
    token = client_token(args, workspace) if args.transport == "http" else None
    target = config_path(args.ide, workspace)
    in_workspace = is_inside(target, workspace)
    written_token = token
    if args.write and args.transport == "http" and in_workspace:
        # The workspace is recorded, snapshotted and packed: the token never goes there.
        written_token = token_reference(args.ide, target, workspace)
    entry = server_entry(
        args.ide,
        workspace,
        transport=args.transport,
        url=args.url,
        token=written_token if args.write else token,
        extra_args=passthrough_args(args),
    )
    if not args.write:
        sys.stdout.write(render_document(args.ide, entry))
        print(f"# merge into {target} (or rerun with --write)", file=sys.stderr)
        if args.transport == "http" and token is None:
            print("# no token found: start `rgbridge serve --transport http` first, or pass --token", file=sys.stderr)
        return 0
    inputs = [vscode_token_input()] if written_token and written_token.startswith("${input:") else None
    merge_into(target, args.ide, entry, inputs=inputs, private_backup=in_workspace)
    print(f"wrote server 'rgbridge' into {target}", file=sys.stderr)
    if written_token is not None and written_token != token:
        how = (
            "VS Code asks for it once (input 'rgbridge-token')"
            if inputs
            else f"set {TOKEN_ENV} in the environment the IDE starts from"
        )
        value = (
            f"this config's client credential is\n{token}"
            if token
            else "no server token found to mint it from: start `rgbridge serve --transport http` first, or pass --token"
        )
        print(f"the bearer token was not written into the workspace: {how}; {value}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- python -m mcp_server
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_server", description="rgbridge MCP server (= rgbridge serve)")
    add_serve_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return cmd_serve(args)
    except BridgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
