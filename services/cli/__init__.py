"""The `queueflow` command: serve, migrate, and a small JSON client for jobs, the DLQ and the system.

This is the entry layer: it may import every service (through services.serve), and nothing
imports it.

Client commands read `--server-url` (QUEUEFLOW_SERVER_URL, default http://localhost:8000) and
`--token` (QUEUEFLOW_TOKEN, default `dev`) and print JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from services.cli.client import Client, ClientError
from services.serve import serve
from shared.config import ConfigError, add_serve_arguments, settings_from
from shared.db.migrate import apply_migrations
from shared.logs import configure

TERMINAL = {"completed", "failed", "cancelled"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queueflow", description="QueueFlow: a PostgreSQL-native job queue."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run QueueFlow services (--mode all|api|janitor|workflow|worker)")
    add_serve_arguments(serve)

    migrate = sub.add_parser("migrate", help="apply database migrations and exit")
    migrate.add_argument("--database-url", default=None, help="PostgreSQL URL [DATABASE_URL]")

    def client(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--server-url", default=os.environ.get("QUEUEFLOW_SERVER_URL", "http://localhost:8000")
        )
        p.add_argument("--token", default=os.environ.get("QUEUEFLOW_TOKEN", "dev"))
        return p

    job = sub.add_parser("job", help="create, inspect, cancel and watch jobs").add_subparsers(
        dest="action", required=True
    )
    create = client(job.add_parser("create", help="enqueue a job"))
    create.add_argument("--task", required=True)
    create.add_argument("--payload", default="{}", help="JSON object")
    create.add_argument("--queue")
    create.add_argument("--priority", type=int)
    create.add_argument("--max-retries", type=int)
    create.add_argument("--timeout-secs", type=int)
    create.add_argument("--idempotency-key")
    create.add_argument("--run-at", help="RFC 3339 instant")
    create.add_argument("--wait", action="store_true", help="wait until the job finishes")
    client(job.add_parser("get", help="show a job")).add_argument("id")
    listing = client(job.add_parser("list", help="list jobs"))
    for name in ("--status", "--queue", "--task-name", "--cursor"):
        listing.add_argument(name)
    listing.add_argument("--limit", type=int)
    client(job.add_parser("cancel", help="cancel a job")).add_argument("id")
    watch = client(job.add_parser("watch", help="poll a job until it finishes"))
    watch.add_argument("id")
    watch.add_argument("--timeout-secs", type=float, default=600.0)

    dlq = sub.add_parser("dlq", help="dead letters").add_subparsers(dest="action", required=True)
    dlq_list = client(dlq.add_parser("list", help="list dead letters"))
    dlq_list.add_argument("--queue")
    dlq_list.add_argument("--limit", type=int)
    client(dlq.add_parser("get", help="show a dead letter")).add_argument("id", type=int)
    client(dlq.add_parser("replay", help="replay a dead letter as a fresh job")).add_argument("id", type=int)

    client(sub.add_parser("stats", help="durable counts for your tenant"))
    client(sub.add_parser("tasks", help="tasks the in-process workers handle"))
    return parser


POLL_SECS = 0.5


async def _watch(client: Client, job_id: str, timeout: float) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        job = await client.call("GET", f"/api/v1/jobs/{job_id}")
        if job["status"] in TERMINAL or loop.time() > deadline:
            return job
        await asyncio.sleep(POLL_SECS)


async def _job_command(args: argparse.Namespace, client: Client) -> Any:
    if args.action == "create":
        config = {
            k: v
            for k, v in {
                "queue": args.queue,
                "priority": args.priority,
                "max_retries": args.max_retries,
                "timeout": args.timeout_secs,
            }.items()
            if v is not None
        }
        body: dict[str, Any] = {"task_name": args.task, "payload": json.loads(args.payload)}
        if config:
            body["config"] = config
        if args.run_at:
            body["run_at"] = args.run_at
        headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
        created = await client.call("POST", "/api/v1/jobs", body, headers=headers)
        return await _watch(client, created["job_id"], 600.0) if args.wait else created
    if args.action == "get":
        return await client.call("GET", f"/api/v1/jobs/{args.id}")
    if args.action == "list":
        return await client.call(
            "GET",
            "/api/v1/jobs",
            query={
                "status": args.status,
                "queue": args.queue,
                "task_name": args.task_name,
                "limit": args.limit,
                "cursor": args.cursor,
            },
        )
    if args.action == "cancel":
        await client.call("POST", f"/api/v1/jobs/{args.id}/cancel")
        return {"cancelled": args.id}
    return await _watch(client, args.id, args.timeout_secs)


async def _dlq_command(args: argparse.Namespace, client: Client) -> Any:
    if args.action == "list":
        return await client.call("GET", "/api/v1/dlq", query={"queue": args.queue, "limit": args.limit})
    if args.action == "get":
        return await client.call("GET", f"/api/v1/dlq/{args.id}")
    return await client.call("POST", f"/api/v1/dlq/{args.id}/replay")


async def _client_command(args: argparse.Namespace) -> Any:
    client = Client(args.server_url, args.token)
    if args.command == "job":
        return await _job_command(args, client)
    if args.command == "dlq":
        return await _dlq_command(args, client)
    if args.command == "stats":
        return await client.call("GET", "/api/v1/stats")
    return await client.call("GET", "/api/v1/tasks")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "migrate":
            url = args.database_url or os.environ.get("DATABASE_URL")
            if not url:
                raise ConfigError("--database-url (DATABASE_URL) is required")
            applied = asyncio.run(apply_migrations(url))
            print(json.dumps({"applied": applied}))
            return 0
        out = asyncio.run(_client_command(args))
    except (ConfigError, ClientError) as err:
        print(f"queueflow: {err}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2))
    return 0


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
