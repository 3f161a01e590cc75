"""`python -m bench.dbtime [--quick] [--runs N] [--systems qf,graphile,pgboss,pgqueuer] [--top K]`:
where each system's in-process drain spends PostgreSQL's time, statement by statement.

The drains are bench.compare's (QueueFlow: W1b, `--mode all --workers 16`; upstream's Rust server,
with `--systems rust`, the same W1b with its binary; each peer: its
program's `drain` figure, 20,000 no-op jobs enqueued in bulk and then drained), on one embedded
PostgreSQL started with `pg_stat_statements` (top-level statements; utility ones, COPY among them,
included).
The statistics are reset before each drain and read after it, so each system's figures cover one
database's life: its schema set-up, the enqueue, the claims and the completions.

Per system it prints the drain rate, the statements' execution time per job (the sum of
`total_exec_time` over the jobs; the network is outside it), and the statements that took the
most, each with its calls, rows and microseconds per job. Left out of the sum, and shown apart:
the measuring harnesses' own statements (their `SELECT count(...)` polls and the commit probe's
`bench_probe` table), the schema set-up (CREATE, ALTER, DO ...) and explicit transaction control
(a COMMIT statement's time is its wait for the WAL flush; a statement outside a transaction block
commits, and waits, outside its execution time).

pg_stat_statements costs a little on every statement, the same for every system: the rates here
are for reading beside the statement times, not in place of `make bench-compare`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg

from bench import compare, harness, peers
from bench.context import Context
from bench.scenarios import SCENARIOS

SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "top",
    "pg_stat_statements.track_utility": "on",  # COPY is one (QueueFlow's batch insert)
    "pg_stat_statements.max": "10000",
}
# Every statement run in a drain's database (the admin database, where the extension lives, and
# the CREATE/DROP DATABASE run from it are not).
STATEMENTS = """
SELECT s.query, s.calls, s.rows, s.total_exec_time
FROM pg_stat_statements s
WHERE s.dbid <> (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY s.total_exec_time DESC
"""
_COMMENT = re.compile(r"--[^\n]*")
_SPACE = re.compile(r"\s+")
_SETUP = (
    "create",
    "alter",
    "drop",
    "do",
    "comment",
    "grant",
    "revoke",
    "set",
    "reset",
    "show",
    "select set_config",
)
_TRANSACTION = ("begin", "start transaction", "commit", "end", "rollback", "savepoint", "release")


@dataclasses.dataclass(frozen=True)
class Statement:
    text: str  # comments dropped, white space folded
    calls: int
    rows: int
    ms: float

    @property
    def kind(self) -> str:
        """`own` (the system's work), `harness` (the measuring harness's), `setup` (schema and
        settings) or `transaction` (transaction control)."""
        text = self.text.lower()
        if text.startswith("select count(") or "bench_probe" in text:
            return "harness"
        first = text.split("(", 1)[0].split(" ", 1)[0].rstrip(";")
        if first in _TRANSACTION or text.startswith("start transaction"):
            return "transaction"
        if first in _SETUP or text.startswith("select set_config"):
            return "setup"
        return "own"


def statement(query: str, calls: int, rows: int, ms: float) -> Statement:
    return Statement(_SPACE.sub(" ", _COMMENT.sub(" ", query)).strip(), calls, rows, ms)


def summary(system: str, jobs: int, rate: float, statements: list[Statement], top: int) -> dict[str, Any]:
    own = [s for s in statements if s.kind == "own"]
    apart = {
        kind: 1000 * sum(s.ms for s in statements if s.kind == kind) / jobs
        for kind in ("transaction", "setup", "harness")
    }
    return {
        "system": system,
        "jobs": jobs,
        "jobs_per_s": rate,
        "us_per_job": 1000 * sum(s.ms for s in own) / jobs,
        "apart_us_per_job": apart,
        "statements": [
            {"us_per_job": 1000 * s.ms / jobs, "calls": s.calls, "rows": s.rows, "text": s.text}
            for s in sorted(own, key=lambda s: -s.ms)[:top]
        ],
    }


def render(result: dict[str, Any], width: int = 110) -> str:
    apart = ", ".join(f"{kind} {us:.1f}" for kind, us in result["apart_us_per_job"].items())
    head = f"{result['system']}: {result['jobs_per_s']:,.0f} jobs/s; statements {result['us_per_job']:.1f} us"
    lines = [
        f"{head} per job (apart: {apart})",
        f"  {'us/job':>7}  {'calls':>6}  {'rows':>7}  statement",
    ]
    for s in result["statements"]:
        text = s["text"] if len(s["text"]) <= width else s["text"][: width - 3] + "..."
        lines.append(f"  {s['us_per_job']:7.1f}  {s['calls']:6d}  {s['rows']:7d}  {text}")
    return "\n".join(lines)


async def _statements(admin_dsn: str) -> list[Statement]:
    conn = await asyncpg.connect(admin_dsn)
    try:
        return [statement(*r) for r in await conn.fetch(STATEMENTS)]
    finally:
        await conn.close()


async def drain(ctx: Context, system: str, run_no: int, workers: int) -> tuple[int, float]:
    """One drain of `system` in a fresh database: (jobs, jobs/s)."""
    if system in compare.SERVERS:
        upstream = peers.rust_server() if system == compare.UPSTREAM else None
        got = await SCENARIOS["W1b"].run(
            dataclasses.replace(ctx, drain_workers=(workers,), upstream=upstream), run_no
        )
        return ctx.n(20_000, 2_000), float(got[f"w{workers}_jobs_per_s"])
    got = await compare.run_peer(ctx, system, "drain", run_no)
    return int(got["jobs"]), float(got["jobs_per_s"])


async def measure(
    ctx: Context, systems: list[str], runs: int, workers: int, top: int
) -> list[dict[str, Any]]:
    await ctx.pg.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    results = []
    for run_no in range(1, runs + 1):
        for system in compare.rotation(systems, run_no):
            print(f"[dbtime] run {run_no}/{runs}: {system} ...", file=sys.stderr, flush=True)
            await ctx.pg.execute("SELECT pg_stat_statements_reset()")
            jobs, rate = await drain(ctx, system, run_no, workers)
            result = {"run": run_no, **summary(system, jobs, rate, await _statements(ctx.pg.dsn), top)}
            print(render(result), flush=True)
            results.append(result)
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.dbtime",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="smoke check: 2,000 jobs")
    p.add_argument("--runs", type=int, default=1, help="drains per system (default 1)")
    p.add_argument(
        "--systems", default="qf,graphile,pgboss,pgqueuer", help="as bench.compare takes them (rust too)"
    )
    p.add_argument("--qf-workers", type=int, default=16, help="QueueFlow's --workers")
    p.add_argument("--top", type=int, default=8, help="statements shown per system")
    p.add_argument("--out", type=Path, default=harness.OUT_DIR / "dbtime.json", help="results JSON path")
    args = p.parse_args(argv)
    try:
        args.systems = compare.chosen_systems(args.systems)
        if compare.UPSTREAM in args.systems:
            peers.rust_server()
    except (ValueError, FileNotFoundError) as err:
        p.error(str(err))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log_dir = args.out.parent / "dbtime-logs"
    harness.begin(log_dir)
    started = time.monotonic()
    try:
        with harness.cluster("qfdbtime-pg-", settings=SETTINGS) as pg:
            ctx = Context(pg=pg, quick=args.quick, log_dir=log_dir, out_dir=args.out.parent)
            results = asyncio.run(measure(ctx, args.systems, args.runs, args.qf_workers, args.top))
    except KeyboardInterrupt:
        print("\n[dbtime] interrupted; every process this harness started has been stopped", file=sys.stderr)
        return 130
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"settings": SETTINGS, "results": results}, indent=2) + "\n")
    print(f"\n[dbtime] {time.monotonic() - started:.0f}s total; results in {args.out}; logs in {log_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
