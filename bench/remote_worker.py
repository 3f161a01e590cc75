"""`python -m bench.remote_worker`: remote HTTP worker loops in a process of their own.

W1a with `--remote-processes N` starts N of these, so the client side of the remote drain is
spread over several processes, as a fleet of real workers would be, instead of running every loop
in the harness's one event loop. Each process runs `--loops` copies of `bench.client.worker_loop`
(lease up to `--max-jobs`, then one complete call per job, sent together, or with `--ack
sequential` one after another, each answer awaited, or with `--ack batch` one batch
acknowledgement for them all) on one keep-alive session. With `--client sdk` each loop is instead
the Python SDK's worker loop (`unofficial_queueflow_client.Worker`, concurrency and batch size
`--max-jobs`, a no-op handler), which acknowledges as that SDK does against this server.

Protocol with the harness, one line at a time: this process prints `ready` once its session is
open, starts its loops when it reads `go` on stdin, stops them when it reads `stop` (or stdin
closes), then prints `{"completed": N}` and exits. Errors go to stderr (the harness's log).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from bench import client

SDK_SRC = Path(__file__).resolve().parents[1] / "sdks" / "python" / "src"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.remote_worker", description=__doc__)
    p.add_argument("--base-url", required=True, help="the api process, e.g. http://127.0.0.1:8080")
    p.add_argument("--queue", required=True)
    p.add_argument("--loops", type=int, default=8, help="concurrent worker loops in this process")
    p.add_argument("--max-jobs", type=int, default=50, help="max_jobs per lease call")
    p.add_argument("--wait-secs", type=int, default=1, help="long-poll wait per lease call")
    p.add_argument(
        "--client", choices=("raw", "sdk"), default="raw", help="raw calls or the Python SDK's loop"
    )
    p.add_argument(
        "--ack",
        choices=client.ACKS,
        default="each",
        help="raw client: per job (calls sent together, or one after another) or one batch call",
    )
    return p.parse_args(argv)


async def _stdin() -> asyncio.StreamReader:
    """stdin as a stream, so a pending read can be cancelled (a thread blocked in readline cannot)."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def _line(reader: asyncio.StreamReader) -> str:
    return (await reader.readline()).decode().strip()


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


async def run(args: argparse.Namespace) -> int:
    if args.client == "sdk":
        return await run_sdk(args)
    commands = await _stdin()
    async with client.session() as http:
        _say("ready")
        if await _line(commands) != "go":
            return 0
        stop = asyncio.Event()
        loops = [
            asyncio.create_task(
                client.worker_loop(
                    http, args.base_url, args.queue, args.max_jobs, args.wait_secs, stop, ack=args.ack
                )
            )
            for _ in range(args.loops)
        ]
        told = asyncio.create_task(_line(commands))
        # Until told to stop, or until a loop fails (stop_loops re-raises its exception).
        await asyncio.wait([told, *loops], return_when=asyncio.FIRST_COMPLETED)
        told.cancel()
        await client.stop_loops(loops, stop)
        completed = sum(t.result() for t in loops if not t.cancelled())
    _say(json.dumps({"completed": completed}))
    return 0


async def run_sdk(args: argparse.Namespace) -> int:
    """`--loops` SDK workers on one client; `completed` counts the handlers that returned."""
    sys.path.insert(0, str(SDK_SRC))
    from unofficial_queueflow_client import Client, Worker

    commands = await _stdin()
    completed = 0

    def noop(ctx: object) -> dict[str, bool]:
        nonlocal completed
        completed += 1
        return {"ok": True}

    async with Client(args.base_url, client.TOKEN) as sdk:
        workers = [
            Worker(
                sdk,
                args.queue,
                {"echo": noop},
                lease_secs=60,
                wait_secs=args.wait_secs,
                concurrency=args.max_jobs,
                batch_size=args.max_jobs,
                drain_timeout=10,
            )
            for _ in range(args.loops)
        ]
        _say("ready")
        if await _line(commands) != "go":
            return 0
        loops = [asyncio.create_task(w.run()) for w in workers]
        told = asyncio.create_task(_line(commands))
        await asyncio.wait([told, *loops], return_when=asyncio.FIRST_COMPLETED)
        told.cancel()
        for w in workers:
            w.stop()
        for result in await asyncio.gather(*loops, return_exceptions=True):
            if isinstance(result, Exception):
                raise result
    _say(json.dumps({"completed": completed}))
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
