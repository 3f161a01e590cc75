"""L: reference points from pgbench on the same schema and the server's own SQL.

Method: for each script, a fresh database migrated with `queueflow migrate`, then pgbench from the
embedded server's bindir: `-n -M prepared -c 4 -j 2 -T secs` (8 s for cycle1, 5 s for the others;
3 s with --quick). The SQL is taken verbatim from shared/db/queries/jobs.sql at run
time (claim_jobs, complete_jobs, insert_jobs), with the parameters written in as literals or
pgbench variables, so the reference follows the server's queries if they change.

- cycle1 / cycle10: 20,000 pending rows (40,000 for cycle10; a fifth with --quick) are seeded through insert_jobs in
  1,000-row statements, as POST /jobs/batch does. One pgbench "transaction" is the server's
  claim (LIMIT 1 or 10, its own database transaction; wrapped in a CTE so \\gset can collect the
  ids and lease tokens) followed by complete_jobs for those rows (a second transaction), i.e.
  exactly the two statements a no-op job costs. rows/s uses the database clock, as W1 does:
  completed rows / (max(completed_at) - min(started_at)); should the backlog run out before the
  time is up, the rate still covers only the window in which rows were completed.
- cycle10_simple: the same with a plain claim (one ORDER BY ... LIMIT 10 FOR UPDATE SKIP LOCKED, no
  per-tenant fair share; upstream's shape) and the index that shape needs, created for the run:
  what the server's fuller fair-share claim costs.
- insert1 / insert1000: insert_jobs with 1 or 1,000 rows per statement (ids from
  gen_random_uuid(), payload {"i": n}, the default config); rows/s = tps x rows.

Latency is pgbench's "latency average" per script execution with 4 clients.
"""

from __future__ import annotations

import asyncio
import re

import msgspec

from bench.context import PROBE_FIGURES, Context, Scenario, probe_commits
from bench.harness import connect
from bench.report import Figure
from devkit import REPO
from devkit.procs import CLI_ARGV
from shared.db import jobs as jobs_db
from shared.db.pool import init_connection
from shared.db.queries import Q
from shared.domain.jobs import JobConfig, NewJob

CLIENTS, THREADS = 4, 2
DRAIN_WINDOW = """SELECT count(*) AS n, EXTRACT(EPOCH FROM max(completed_at) - min(started_at))::float8 AS secs
FROM queueflow.jobs WHERE status = 'completed'"""
QUEUE = "default"
TENANT = "tenant1"


def figures(ctx: Context) -> list[Figure]:
    return [
        Figure("cycle1_rows_per_s", "pgbench claim 1 + complete (2 commits)", "rows/s"),
        Figure("cycle1_latency_ms", "pgbench claim 1 + complete, latency avg", "ms"),
        Figure("cycle10_rows_per_s", "pgbench claim 10 + complete 10 (2 commits)", "rows/s"),
        Figure(
            "cycle10_simple_rows_per_s",
            "pgbench plain claim 10 (upstream shape + its index) + complete 10",
            "rows/s",
        ),
        Figure("insert1_rows_per_s", "pgbench insert_jobs, 1 row", "rows/s"),
        Figure("insert1_latency_ms", "pgbench insert_jobs, 1 row, latency avg", "ms"),
        Figure("insert1000_rows_per_s", "pgbench insert_jobs, 1000 rows", "rows/s"),
        *PROBE_FIGURES,
    ]


def _bind(sql: str, params: dict[int, str]) -> str:
    """Replace $n placeholders with SQL text; drop comment lines and the trailing semicolon."""
    body = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))

    def value(m: re.Match[str]) -> str:
        n = int(m.group(1))
        if n not in params:
            raise RuntimeError(
                f"the server's statement has a parameter ${n} this harness does not know; "
                "give it a value in bench/scenarios/l_pgbench.py"
            )
        return params[n]

    return re.sub(r"\$(\d+)", value, body.strip().rstrip(";"))


# The plain claim shape (one ORDER BY ... LIMIT ... FOR UPDATE SKIP LOCKED, no per-tenant fair
# share), run with the index it was designed for (the schema's claim index now leads with the tenant,
# so without PLAIN_INDEX this shape sorts the whole backlog on every claim): a baseline that shows
# what the server's fuller fair-share claim costs.
PLAIN_INDEX = """CREATE INDEX bench_plain_claim_idx ON queueflow.jobs (queue_name, priority DESC, scheduled_at, created_at)
WHERE status IN ('pending', 'retrying')"""
SIMPLE_CLAIM = """WITH picked AS (
    SELECT id FROM queueflow.jobs
    WHERE queue_name = $1 AND status IN ('pending', 'retrying') AND scheduled_at <= now()
    ORDER BY priority DESC, scheduled_at, created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE queueflow.jobs j
SET status = 'running', lease_token = gen_random_uuid(),
    locked_until = now() + make_interval(secs => $3::int), delivery_count = j.delivery_count + 1,
    started_at = COALESCE(j.started_at, now()), next_retry_at = NULL
FROM picked WHERE j.id = picked.id
RETURNING j.*"""


def cycle_script(rows: int, claim_sql: str | None = None) -> str:
    # claim_jobs: $1 queue, $2 batch, $3 lease secs, $4 timeout grace, $5 fair-share rotation,
    # $6 the claim's key, $7 the one tenant claimed from (none: every tenant).
    claim = _bind(
        claim_sql or Q.claim_jobs,
        {1: f"'{QUEUE}'", 2: str(rows), 3: "60", 4: "NULL", 5: "0", 6: "gen_random_uuid()", 7: "NULL"},
    )
    ids, toks = "CAST(:ids AS uuid[])", "CAST(:toks AS uuid[])"
    complete = _bind(
        Q.complete_jobs,
        {1: ids, 2: toks, 3: f"""array_fill('{{"ok": true}}'::jsonb, ARRAY[cardinality({ids})])"""},
    )
    return (
        f"WITH claimed AS (\n{claim}\n)\n"
        "SELECT COALESCE(array_agg(id), '{}') AS ids, COALESCE(array_agg(lease_token), '{}') AS toks"
        " FROM claimed \\gset\n"
        f"{complete};\n"
    )


async def insert_script(dsn: str, rows: int) -> str:
    """insert_jobs with `rows` rows. Parameters the harness does not know (the statement grows as the
    server does) become NULLs of the type PostgreSQL infers for them."""
    config = msgspec.json.encode(JobConfig()).decode().replace("'", "''")

    def fill(value: str) -> str:
        return f"array_fill({value}, ARRAY[{rows}])"

    known = {
        1: f"ARRAY(SELECT gen_random_uuid() FROM generate_series(1, {rows}))",
        2: fill("'bench-l'::text"),
        3: fill("'echo'::text"),
        4: f"ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(1, {rows}) g)",
        5: fill(f"'{config}'::jsonb"),
        6: fill("0"),
        7: fill("NULL::timestamptz"),
        8: fill("'{}'::jsonb"),
        9: f"'{TENANT}'",
    }
    conn = await connect(dsn)
    try:
        types = (await conn.prepare(Q.insert_jobs)).get_parameters()
    finally:
        await conn.close()
    params = {}
    for n, typ in enumerate(types, start=1):
        # A NULL array in the multi-argument unnest reads as NULLs for every row.
        params[n] = known.get(n, f"NULL::{typ.schema}.{typ.name}")
    return _bind(Q.insert_jobs, params) + ";\n"


async def _migrate(dsn: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        *CLI_ARGV,
        "migrate",
        "--database-url",
        dsn,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"queueflow migrate failed: {out.decode(errors='replace')}")


async def _seed(dsn: str, total: int) -> None:
    """`total` pending echo jobs through the server's own repository call, 1,000 per statement."""
    conn = await connect(dsn)
    try:
        await init_connection(conn)
        for start in range(0, total, 1000):
            await jobs_db.insert_jobs(
                conn,
                TENANT,
                [
                    NewJob(task_name="echo", queue=QUEUE, payload={"i": i})
                    for i in range(start, min(total, start + 1000))
                ],
            )
    finally:
        await conn.close()


async def _pgbench(ctx: Context, dbname: str, script: str, name: str, secs: int) -> tuple[float, float]:
    """(tps, latency average in ms) of one pgbench run; any aborted client is an error."""
    path = ctx.out_dir / "pgbench" / f"{name}.sql"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    argv = [
        str(ctx.cluster.bindir / "pgbench"),
        "-n",
        "-M",
        "prepared",
        "-c",
        str(CLIENTS),
        "-j",
        str(THREADS),
        "-T",
        str(secs),
        "-f",
        str(path),
        "-h",
        "127.0.0.1",
        "-p",
        str(ctx.cluster.port),
        "-U",
        "postgres",
        dbname,
    ]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd="/"
    )
    out_b, _ = await proc.communicate()
    out = out_b.decode(errors="replace")
    with (ctx.log_dir / f"pgbench-{name}.log").open("a") as log:
        log.write(f"$ {' '.join(argv)}\n{out}\n")
    tps = re.search(r"^tps = ([\d.]+)", out, re.MULTILINE)
    lat = re.search(r"^latency average = ([\d.]+) ms", out, re.MULTILINE)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    if (
        proc.returncode != 0
        or "aborted" in out
        or tps is None
        or lat is None
        or (failed and failed.group(1) != "0")
    ):
        raise RuntimeError(f"pgbench {name} failed (exit {proc.returncode}):\n{out[-2000:]}")
    return float(tps.group(1)), float(lat.group(1))


async def _cycle(ctx: Context, rows: int, secs: int, simple: bool = False) -> tuple[float, float]:
    # 20,000 rows like W1 for single-row cycles; twice that for 10-row cycles, so the backlog lasts
    # the whole run even at 8,000 rows/s (pgbench's latency would count empty cycles otherwise).
    seed = ctx.n(20_000, 4_000) * (2 if rows > 1 else 1)
    async with ctx.database(f"l_cycle{rows}") as dsn:
        await _migrate(dsn)
        if simple:
            conn = await connect(dsn)
            try:
                await conn.execute(PLAIN_INDEX)
            finally:
                await conn.close()
        await _seed(dsn, seed)
        await ctx.pg.execute("CHECKPOINT")
        name = f"cycle{rows}{'_simple' if simple else ''}"
        script = cycle_script(rows, SIMPLE_CLAIM if simple else None)
        _, lat = await _pgbench(ctx, dsn.rsplit("/", 1)[1], script, name, secs)
        conn = await connect(dsn)
        try:
            row = await conn.fetchrow(DRAIN_WINDOW)
        finally:
            await conn.close()
        if not row["n"]:
            raise RuntimeError(f"pgbench cycle{rows} completed no rows")
    return row["n"] / row["secs"], lat


async def _insert(ctx: Context, rows: int, secs: int) -> tuple[float, float]:
    async with ctx.database(f"l_insert{rows}") as dsn:
        await _migrate(dsn)
        tps, lat = await _pgbench(
            ctx, dsn.rsplit("/", 1)[1], await insert_script(dsn, rows), f"insert{rows}", secs
        )
    return tps * rows, lat


async def run(ctx: Context, run_no: int) -> dict[str, float]:
    async with ctx.database("l_probe") as dsn:
        probe = await probe_commits(dsn)
    short, long = ctx.n(5, 3), ctx.n(8, 3)
    c1, c1_lat = await _cycle(ctx, 1, long)
    c10, _ = await _cycle(ctx, 10, short)
    s10, _ = await _cycle(ctx, 10, short, simple=True)
    i1, i1_lat = await _insert(ctx, 1, short)
    i1000, _ = await _insert(ctx, 1000, short)
    return {
        "cycle1_rows_per_s": c1,
        "cycle1_latency_ms": c1_lat,
        "cycle10_rows_per_s": c10,
        "cycle10_simple_rows_per_s": s10,
        "insert1_rows_per_s": i1,
        "insert1_latency_ms": i1_lat,
        "insert1000_rows_per_s": i1000,
        **probe,
    }


SCENARIO = Scenario(
    "L", "pgbench references: the server's claim/complete/insert SQL, -c 4 -j 2", figures, run
)
