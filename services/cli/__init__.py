"""The `queueflow` command: serve, migrate, spec, and a small JSON client for the REST API.

This is the entry layer: it may import every service (through services.serve), and nothing
imports it. The client subcommands are the table in services/cli/commands.py.

Client commands read `--server-url` (QUEUEFLOW_SERVER_URL, default http://localhost:8000) and
`--token` (QUEUEFLOW_TOKEN, default `dev`), before or after their positional arguments, and
print JSON on stdout. An error prints one line to stderr (the server's error body for an error
answer) and exits 2; so does a usage error, through argparse.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import msgspec

from services.api.openapi import build_spec
from services.cli.client import Client, ClientError
from services.cli.commands import COMMANDS, Call, InputError, request
from services.serve import serve
from shared.config import ConfigError, add_serve_arguments, settings_from
from shared.db.migrate import apply_migrations
from shared.db.pool import is_database_error, is_unavailable, where
from shared.logs import configure


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queueflow", description="QueueFlow: a PostgreSQL-native job queue."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run QueueFlow services (--mode all|api|janitor|workflow|worker)")
    add_serve_arguments(serve)

    migrate = sub.add_parser("migrate", help="apply database migrations and exit")
    migrate.add_argument(
        "--database-url",
        default=None,
        help="PostgreSQL URL [QUEUEFLOW_LISTEN_DATABASE_URL, else DATABASE_URL]",
    )

    spec = sub.add_parser("spec", help="write the OpenAPI document as openapi.json and openapi.yaml")
    spec.add_argument("--output-dir", default="spec", help="directory to write to (created if missing)")

    for name, entry in COMMANDS.items():
        if isinstance(entry, Call):
            _add_call(sub, name, entry)
            continue
        actions = sub.add_parser(name, help=entry.help).add_subparsers(dest="action", required=True)
        for action, call in entry.calls.items():
            _add_call(actions, action, call)
    return parser


def _add_call(parent: Any, name: str, call: Call) -> None:
    p: argparse.ArgumentParser = parent.add_parser(name, help=call.help)
    for param in call.params:
        p.add_argument(param, type=call.id_type)
    for option in call.options:
        p.add_argument(option.flag, **option.settings)
    p.add_argument(
        "--server-url",
        default=os.environ.get("QUEUEFLOW_SERVER_URL", "http://localhost:8000"),
        help="the API [QUEUEFLOW_SERVER_URL, default http://localhost:8000]",
    )
    p.add_argument(
        "--token", default=os.environ.get("QUEUEFLOW_TOKEN", "dev"), help="[QUEUEFLOW_TOKEN, default dev]"
    )
    p.set_defaults(call=call)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "migrate":
            out = _migrate(args)
        elif args.command == "spec":
            out = _spec(Path(args.output_dir))
        else:
            call: Call = args.call
            out = asyncio.run((call.run or request)(Client(args.server_url, args.token), args, call))
    except (ConfigError, ClientError, InputError) as err:
        print(f"queueflow: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print(json.dumps(out, indent=2))
    return 0


def _migrate(args: argparse.Namespace) -> Any:
    # A direct URL first, as `serve` migrates through it (a transaction pooler's works too: the
    # migrations run in one transaction under a transaction-scoped lock).
    url = (
        args.database_url or os.environ.get("QUEUEFLOW_LISTEN_DATABASE_URL") or os.environ.get("DATABASE_URL")
    )
    if not url:
        raise ConfigError("--database-url (DATABASE_URL) is required")
    try:
        return {"applied": asyncio.run(apply_migrations(url))}
    except Exception as err:
        if is_unavailable(err):
            raise ConfigError(f"cannot reach the database at {where(url)}: {err}") from None
        if is_database_error(err):
            raise ConfigError(f"the database at {where(url)} refused the migration: {err}") from None
        raise


def _spec(directory: Path) -> Any:
    """The document /openapi.json serves, as JSON and as YAML."""
    document = build_spec()
    files = {
        directory / "openapi.json": json.dumps(document, indent=2).encode() + b"\n",
        directory / "openapi.yaml": msgspec.yaml.encode(document),
    }
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for path, content in files.items():
            path.write_bytes(content)
    except OSError as err:
        raise InputError(f"cannot write {err.filename or directory}: {err.strerror or err}") from None
    return {"written": [str(path) for path in files]}


def _serve(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    settings.check_credentials()
    configure(settings.log_level)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(settings))
    else:
        uvloop.run(serve(settings))
    return 0
