"""The client subcommands as a table: each is an HTTP method and a path whose `{placeholders}` are
its positional arguments, the options it takes, and how its request body is built.

A GET sends its options as the query string; any other method sends `body(args)` (or nothing).
An empty answer (204) prints `{done: <the first positional argument>}`. The few commands that do
more than one call (create a job and wait for it, watch a job) name their own `run`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

from services.cli.client import Client

TERMINAL = {"completed", "failed", "cancelled"}
POLL_SECS = 0.5


class InputError(Exception):
    """Input the command could not use (an unreadable or malformed file); the message says which."""


class Option(NamedTuple):
    flag: str
    settings: Mapping[str, Any]

    @property
    def name(self) -> str:
        """The query parameter a GET call sends it as."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def dest(self) -> str:
        """Where argparse keeps it (a `dest` of its own where the name is taken, e.g. `action`)."""
        return str(self.settings.get("dest", self.name))


def opt(flag: str, **settings: Any) -> Option:
    return Option(flag, settings)


Runner = Callable[[Client, argparse.Namespace, "Call"], Coroutine[Any, Any, Any]]


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    help: str
    options: tuple[Option, ...] = ()
    body: Callable[[argparse.Namespace], Any] | None = None
    done: str | None = None
    id_type: Callable[[str], Any] = str
    run: Runner | None = None

    @property
    def params(self) -> list[str]:
        return re.findall(r"{(\w+)}", self.path)

    def url(self, args: argparse.Namespace) -> str:
        return self.path.format(**{name: quote(str(getattr(args, name)), safe="") for name in self.params})


class Group(NamedTuple):
    help: str
    calls: dict[str, Call]


def json_object(text: str) -> dict[str, Any]:
    """argparse type of a JSON object option: a bad one is a usage error."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not JSON: {err}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("not a JSON object")
    return value


def present(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


async def request(client: Client, args: argparse.Namespace, call: Call) -> Any:
    path = call.url(args)
    if call.method == "GET":
        return await client.call("GET", path, query={o.name: getattr(args, o.dest) for o in call.options})
    answer = await client.call(call.method, path, call.body(args) if call.body else None)
    if answer is None and call.done:
        return {call.done: getattr(args, call.params[0])}
    return answer


async def watch(client: Client, job_id: str, timeout: float) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        job = await client.call("GET", f"/api/v1/jobs/{quote(job_id, safe='')}")
        if job["status"] in TERMINAL or loop.time() > deadline:
            return job
        await asyncio.sleep(POLL_SECS)


async def create_job(client: Client, args: argparse.Namespace, call: Call) -> Any:
    config = present(
        {
            "queue": args.queue,
            "priority": args.priority,
            "max_retries": args.max_retries,
            "timeout": args.timeout_secs,
        }
    )
    body = present(
        {"task_name": args.task, "payload": args.payload, "config": config or None, "run_at": args.run_at}
    )
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    created = await client.call("POST", call.path, body, headers=headers)
    return await watch(client, created["job_id"], 600.0) if args.wait else created


async def watch_job(client: Client, args: argparse.Namespace, call: Call) -> Any:
    return await watch(client, args.id, args.timeout_secs)


async def job_logs(client: Client, args: argparse.Namespace, call: Call) -> Any:
    """A page of the job's log lines; with --follow, every line as it arrives (one JSON object per
    line on stdout) until the job finishes, then the job's final status and log totals."""
    path = call.url(args)
    if not args.follow:
        return await client.call("GET", path, query={"after": args.after, "limit": args.limit})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + args.timeout_secs
    after = args.after or 0
    while True:
        # The job's status first: a line it logged before finishing is then read below.
        job = await client.call("GET", f"/api/v1/jobs/{quote(args.id, safe='')}")
        while True:
            page = await client.call("GET", path, query={"after": after, "limit": 1000})
            for line in page["lines"]:
                print(json.dumps(line), flush=True)
                after = line["seq"]
            if not page["has_more"]:
                break
        if job["status"] in TERMINAL or loop.time() > deadline:
            return {
                "job_id": args.id,
                "status": job["status"],
                "last_seq": page["last_seq"],
                "dropped": page["dropped"],
            }
        await asyncio.sleep(POLL_SECS)


def workflow_definition(args: argparse.Namespace) -> Any:
    """The JSON workflow definition in `--file` (`-` is stdin)."""
    name = "stdin" if args.file == "-" else args.file
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
        return json.loads(text)
    except OSError as err:
        raise InputError(f"cannot read {name}: {err.strerror or err}") from None
    except ValueError as err:
        raise InputError(f"{name} is not JSON: {err}") from None


def cron_body(args: argparse.Namespace) -> dict[str, Any]:
    return present(
        {
            "name": args.name,
            "cron_expr": args.schedule,
            "task_name": args.task,
            "workflow": args.workflow,
            "payload": args.payload,
            "queue": args.queue,
            "timezone": args.timezone,
        }
    )


def worker_key_body(args: argparse.Namespace) -> dict[str, Any]:
    return present({"name": args.name, "queues": args.queue, "expires_at": args.expires_at})


def header_pairs(raw: str) -> tuple[str, str]:
    """`Name: value` (a static header of a push endpoint)."""
    name, sep, value = raw.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"want 'Name: value', not {raw!r}")
    return name.strip(), value.strip()


def push_endpoint_body(args: argparse.Namespace) -> dict[str, Any]:
    headers = None if args.header is None else dict(args.header)
    body = {
        "name": args.name,
        "url": args.url,
        "queues": args.queue,
        "concurrency": args.concurrency,
        "timeout_secs": args.timeout_secs,
        "headers": headers,
    }
    if getattr(args, "paused", None) is not None:
        body["paused"] = args.paused
    return present(body)


PUSH_FIELDS = (
    opt("--queue", action="append", help="a queue it drains (repeat it)"),
    opt("--concurrency", type=int, help="deliveries in flight at most (default 10)"),
    opt("--timeout-secs", type=int, help="a delivery's time-out (default 30)"),
    opt("--header", action="append", type=header_pairs, help="a static header, 'Name: value' (repeat it)"),
)

PAGE = (opt("--limit", type=int), opt("--cursor", help="next_cursor of the previous page"))
JOBS = "/api/v1/jobs"
WORKFLOWS = "/api/v1/workflows"
CRON = "/api/v1/cron"
WORKER_KEYS = "/api/v1/worker-keys"
PUSH = "/api/v1/push-endpoints"

COMMANDS: dict[str, Call | Group] = {
    "job": Group(
        "create, inspect, cancel, retry and watch jobs",
        {
            "create": Call(
                "POST",
                JOBS,
                "enqueue a job",
                (
                    opt("--task", required=True),
                    opt("--payload", type=json_object, default="{}", help="JSON object"),
                    opt("--queue"),
                    opt("--priority", type=int),
                    opt("--max-retries", type=int),
                    opt("--timeout-secs", type=int),
                    opt("--idempotency-key"),
                    opt("--run-at", help="RFC 3339 instant"),
                    opt("--wait", action="store_true", help="wait until the job finishes"),
                ),
                run=create_job,
            ),
            "get": Call("GET", JOBS + "/{id}", "show a job"),
            "list": Call(
                "GET",
                JOBS,
                "list jobs",
                (
                    opt("--status"),
                    opt("--queue"),
                    opt("--task-name"),
                    opt("--id-contains", help="any piece of the job id (hex digits and dashes)"),
                    *PAGE,
                ),
            ),
            "cancel": Call("POST", JOBS + "/{id}/cancel", "cancel a job", done="cancelled"),
            "retry": Call("POST", JOBS + "/{id}/retry", "run a failed or cancelled job again, in place"),
            "watch": Call(
                "GET",
                JOBS + "/{id}",
                "poll a job until it finishes",
                (opt("--timeout-secs", type=float, default=600.0),),
                run=watch_job,
            ),
            "logs": Call(
                "GET",
                JOBS + "/{id}/logs",
                "a job's log lines (--follow: print them as they arrive until the job finishes)",
                (
                    opt("--after", type=int, help="lines after this seq"),
                    opt("--limit", type=int, help="at most this many (without --follow; up to 1000)"),
                    opt(
                        "--follow", action="store_true", help="keep printing new lines until the job finishes"
                    ),
                    opt(
                        "--timeout-secs", type=float, default=600.0, help="with --follow: give up after this"
                    ),
                ),
                run=job_logs,
            ),
            "attempts": Call(
                "GET", JOBS + "/{id}/attempts", "every attempt of a job: worker, lease start and end, outcome"
            ),
        },
    ),
    "workflow": Group(
        "create, inspect, cancel and retry workflows",
        {
            "create": Call(
                "POST",
                WORKFLOWS,
                "create a workflow from a JSON definition",
                (opt("--file", required=True, help="path of the JSON definition, or - for stdin"),),
                body=workflow_definition,
            ),
            "get": Call("GET", WORKFLOWS + "/{id}", "show a workflow"),
            "list": Call("GET", WORKFLOWS, "list workflows", (opt("--status"), *PAGE)),
            "cancel": Call("POST", WORKFLOWS + "/{id}/cancel", "cancel a workflow", done="cancelled"),
            "retry": Call("POST", WORKFLOWS + "/{id}/retry", "re-run what did not complete", done="retried"),
            "steps": Call("GET", WORKFLOWS + "/{id}/steps", "the live state of every step"),
            "diagram": Call("GET", WORKFLOWS + "/{id}/diagram", "the DAG as a Mermaid diagram"),
        },
    ),
    "cron": Group(
        "cron schedules",
        {
            "create": Call(
                "POST",
                CRON,
                "create a schedule",
                (
                    opt("--name", required=True),
                    opt("--schedule", required=True, help="cron expression"),
                    opt("--task", help="the task each occurrence enqueues (or --workflow)"),
                    opt(
                        "--workflow",
                        type=json_object,
                        help="a workflow definition (JSON object) each occurrence starts, instead of --task",
                    ),
                    opt("--payload", type=json_object, help="JSON object"),
                    opt("--queue"),
                    opt(
                        "--timezone",
                        help="IANA zone the schedule is read in, e.g. Europe/Berlin (default UTC)",
                    ),
                ),
                body=cron_body,
            ),
            "list": Call("GET", CRON, "list schedules", PAGE),
            "get": Call("GET", CRON + "/{id}", "show a schedule"),
            "delete": Call("DELETE", CRON + "/{id}", "delete a schedule", done="deleted"),
            "pause": Call("POST", CRON + "/{id}/pause", "stop a schedule firing", done="paused"),
            "resume": Call("POST", CRON + "/{id}/resume", "resume a schedule", done="resumed"),
        },
    ),
    "worker-key": Group(
        "keys your own workers lease your jobs with",
        {
            "create": Call(
                "POST",
                WORKER_KEYS,
                "mint a worker key (its token is printed this once)",
                (
                    opt("--name", required=True),
                    opt(
                        "--queue",
                        action="append",
                        help="a queue it may lease from (repeat it; none: every queue)",
                    ),
                    opt("--expires-at", help="RFC 3339 instant"),
                ),
                body=worker_key_body,
            ),
            "list": Call("GET", WORKER_KEYS, "your worker keys (without tokens)"),
            "delete": Call("DELETE", WORKER_KEYS + "/{id}", "revoke a worker key", done="deleted"),
        },
    ),
    "push-endpoint": Group(
        "HTTP endpoints QueueFlow delivers your jobs to (docs/push.md)",
        {
            "create": Call(
                "POST",
                PUSH,
                "create a push endpoint (its signing secret is printed this once)",
                (opt("--name", required=True), opt("--url", required=True), *PUSH_FIELDS),
                body=push_endpoint_body,
            ),
            "list": Call("GET", PUSH, "your push endpoints (without secrets)"),
            "get": Call("GET", PUSH + "/{id}", "show a push endpoint and its breaker"),
            "update": Call(
                "PATCH",
                PUSH + "/{id}",
                "change a push endpoint (a --queue list replaces its queues)",
                (opt("--name"), opt("--url"), *PUSH_FIELDS),
                body=push_endpoint_body,
            ),
            "pause": Call("PATCH", PUSH + "/{id}", "stop its deliveries", body=lambda _: {"paused": True}),
            "resume": Call(
                "PATCH", PUSH + "/{id}", "resume its deliveries", body=lambda _: {"paused": False}
            ),
            "rotate-secret": Call(
                "POST",
                PUSH + "/{id}/rotate-secret",
                "a new signing secret (printed this once); the old one signs beside it for --grace-secs",
                (opt("--grace-secs", type=int, help="default 86400; 0 stops the old secret at once"),),
                body=lambda args: present({"grace_secs": args.grace_secs}),
            ),
            "deliveries": Call(
                "GET",
                PUSH + "/{id}/deliveries",
                "its recent deliveries, newest first",
                (opt("--limit", type=int),),
            ),
            "delete": Call("DELETE", PUSH + "/{id}", "remove a push endpoint", done="deleted"),
        },
    ),
    "dlq": Group(
        "dead letters",
        {
            "list": Call("GET", "/api/v1/dlq", "list dead letters", (opt("--queue"), *PAGE)),
            "get": Call("GET", "/api/v1/dlq/{id}", "show a dead letter", id_type=int),
            "replay": Call(
                "POST", "/api/v1/dlq/{id}/replay", "replay a dead letter as a fresh job", id_type=int
            ),
        },
    ),
    "queue": Group(
        "your backlog per queue; pause and resume claims; a queue's retention of completed jobs",
        {
            "list": Call("GET", "/api/v1/queues", "your backlog per queue"),
            "get": Call("GET", "/api/v1/queues/{queue}", "one queue's backlog and settings"),
            "set": Call(
                "PATCH",
                "/api/v1/queues/{queue}",
                "change a queue's settings for your jobs",
                (
                    opt(
                        "--retention",
                        choices=("keep", "remove_completed"),
                        help="keep completed jobs until retention deletes them, or remove each as it completes",
                    ),
                ),
                body=lambda args: present({"retention": args.retention}),
            ),
            "pause": Call("POST", "/api/v1/queues/{queue}/pause", "stop claims of your jobs on a queue"),
            "resume": Call("POST", "/api/v1/queues/{queue}/resume", "let claims of your jobs resume"),
        },
    ),
    "workers": Call("GET", "/api/v1/workers", "the workers that leased your jobs, live or not"),
    "stats": Call("GET", "/api/v1/stats", "durable counts for your tenant"),
    "tasks": Call("GET", "/api/v1/tasks", "tasks the in-process workers handle"),
    "whoami": Call("GET", "/api/v1/whoami", "your tenant, access, role and actor id"),
    "audit": Call(
        "GET",
        "/api/v1/audit",
        "your tenant's audit log, newest first (admin role)",
        (
            opt("--actor", help="only this actor (key:<id>, jwt:<sub>, oidc:<sub>)"),
            # (`action` is the dest of the command groups' subcommands)
            opt("--action", dest="audit_action", help="only this action (an operation id, e.g. cancelJob)"),
            opt("--target", help="only entries naming this id"),
            opt("--since", help="entries at or after this RFC 3339 instant"),
            opt("--until", help="entries before this RFC 3339 instant"),
            *PAGE,
        ),
    ),
}
