"""`python -m bench.compare [--quick] [--runs N] [--systems qf,rust,graphile,pgboss,pgqueuer]`:
QueueFlow beside upstream's Rust server, graphile-worker, pg-boss and PgQueuer, on one PostgreSQL,
in one invocation.

One embedded PostgreSQL (bench.harness.cluster(), a devkit.pg throwaway cluster with fsync and
synchronous_commit on, as `python -m bench` starts it) serves every system. Each measurement gets a
brand-new database. The systems are interleaved: run 1 measures QueueFlow, the Rust server,
graphile-worker, pg-boss, PgQueuer in turn, run 2 starts one system later, and so on, so no system
always runs first or last. Three runs by default; the table shows the median with min-max beside
it, and the ratio QueueFlow / other of the medians. Results also go to bench/out/compare.json.

QueueFlow's figures come from its own scenarios (bench/scenarios), run with these parameters:
- drain, in-process: W1b, `--mode all --workers 16` (--qf-workers); `--mode all` with no tuning
  flag; the same on a queue set to remove finished jobs (bench.client.make_queue_remove_finished);
- drain, remote HTTP: W1a with its loops in 2 client processes x 8 lease loops, max_jobs 50: one
  complete call per job, each loop awaiting each answer before the next call (issue 38's
  configuration); per-job calls of a lease sent together; one batch acknowledgement per lease;
  the Python, Go and Rust SDKs' worker loops;
- drain by push: P, `--mode all` pushing to a local receiver process with an endpoint of
  concurrency 300 (PUSH_CONCURRENCY), QueueFlow only; beside it, its ratio to the remote drain with
  one complete per job in order of the same run;
- batch enqueue: E's batch figure (sequential 1,000-job POST /jobs/batch; E's single-POST phase
  runs first, as in `python -m bench E`);
- latency at 200 jobs/s: W2's 5 ms phase, client clock (POST start -> lease received), once with
  16 loops parked in long-poll leasing up to 50, once with 200 parked.
Upstream's Rust server (crates.io `queueflow` 0.6.0, built by `make bench-peers`) speaks the same
API and shares the schema, so the same scenarios measure it, its binary in place of QueueFlow's
servers (Context.upstream), for every figure but the SDK loops. What it lacks (a batch
acknowledgement route, a queue that removes finished jobs) is skipped with a note, and where it
was not built the whole column is (bench/peers/rust/not-built.txt says why).
Each peer's figures come from its program in bench/peers (one process per measurement, which
prints one JSON line); see docs/benchmarks.md, "The comparison", for their configurations.

`--quick`: 2,000 jobs per drain, 5 timed batches, 200 latency jobs, one run: a smoke check only.
`--markdown`: print the results in --out as a Markdown table and exit (runs nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.metadata
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench import harness, peers, probes
from bench.context import Context, Unsupported, probe_commits
from bench.report import fmt, load_results, summarize
from bench.scenarios import SCENARIOS
from devkit import REPO

QF = "QueueFlow"
UPSTREAM = "upstream (Rust)"  # upstream's own server, crates.io queueflow (bench.peers.RUST_SERVER_VERSION)
SERVERS = (QF, UPSTREAM)  # measured with QueueFlow's scenarios; the others are the peers' programs
SYSTEMS = (QF, UPSTREAM, "graphile-worker", "pg-boss", "PgQueuer")
NAMES = {
    "qf": QF,
    "queueflow": QF,
    "rust": UPSTREAM,
    "upstream": UPSTREAM,
    "graphile": "graphile-worker",
    "graphile-worker": "graphile-worker",
    "pgboss": "pg-boss",
    "pg-boss": "pg-boss",
    "pgqueuer": "PgQueuer",
}
PEER_TIMEOUT_SECS = 900.0
REMOTE_PROCESSES, REMOTE_LOOPS, REMOTE_BATCH = 2, 8, 50
# W1a's shapes in the comparison: (figure key, what runs, W1a parameters). The raw loops' shapes
# (no remote_client) run against the Rust server too; the SDK loops are QueueFlow's own clients.
REMOTE_SHAPES: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("remote_serial_drain_jobs_per_s", "loops, one complete per job in order,", {"remote_ack": "sequential"}),
    ("remote_drain_jobs_per_s", "loops, per-job completes sent together,", {}),
    ("remote_batch_drain_jobs_per_s", "loops, batch ack,", {"remote_ack": "batch"}),
    ("remote_sdk_drain_jobs_per_s", "Python SDK workers", {"remote_client": "sdk"}),
    ("remote_gosdk_drain_jobs_per_s", "Go SDK workers", {"remote_client": "go-sdk"}),
    ("remote_rustsdk_drain_jobs_per_s", "Rust SDK workers", {"remote_client": "rust-sdk"}),
)
# P's endpoint concurrency in the comparison: high enough not to be the bound (100 was: a busy run read
# 681 jobs/s at 100, 1,041 at 300; 1,464 at 300 and 1,479 at 1,000 in another)
PUSH_CONCURRENCY = 300
PUSH_RATIO = "push_over_remote_serial"  # derived per run: push drain / remote one-complete-per-job drain
LATENCY_SHAPES = {"latency": (16, 50), "latency_200": (200, 50)}  # parked loops, max_jobs
LATENCY_INTERVAL_MS = 5.0  # W2's first phase: 200 jobs/s


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the comparison table: `key` in every system's per-run values."""

    key: str
    name: str  # short, for the table
    description: str  # long, for the notes under it and the JSON
    unit: str
    ratio: bool = True  # print QueueFlow / peer


def rows(quick: bool) -> list[Row]:
    drain_n = "2,000" if quick else "20,000"
    latency = "enqueue-to-start latency at 200 jobs/s (one job every 5 ms, open loop)"
    remote = (
        f"drain {drain_n} no-op jobs through remote HTTP workers (Python aiohttp): {REMOTE_PROCESSES} "
        f"client processes x {REMOTE_LOOPS} lease loops, max_jobs {REMOTE_BATCH}"
    )
    return [
        Row(
            "drain_jobs_per_s",
            "drain, in-process, tuned (--workers 16)",
            f"drain {drain_n} no-op jobs enqueued beforehand, in-process workers in each system's "
            "recommended configuration (QueueFlow and the Rust server: serve --mode all --workers N, "
            "W1b; the peers: see docs/benchmarks.md)",
            "jobs/s",
        ),
        Row(
            "drain_default_jobs_per_s",
            "drain, in-process, no tuning flags",
            "as above, QueueFlow and the Rust server started as their READMEs start them: serve "
            "--mode all and no tuning flag (W1b --drain-untuned); peers: their in-process drain as "
            "above, the figure issue 38's goals compare with",
            "jobs/s",
        ),
        Row(
            "drain_remove_jobs_per_s",
            "drain, in-process, no flags, removing queue",
            "as above on a queue set to remove each job in the statement that completes it "
            "(W1b --drain-untuned --drain-removing; bench.client.make_queue_remove_finished), timed by a "
            "statement trigger's clock; peers: their in-process drain as above (graphile-worker "
            "always deletes a job when it completes)",
            "jobs/s",
        ),
        Row(
            "remote_serial_drain_jobs_per_s",
            "drain, remote HTTP, one complete per job, in order",
            f"{remote}, one POST /api/v1/jobs/{{id}}/complete per job, each loop awaiting its answer "
            "before the next job's call (issue 38's configuration; W1a --remote-ack sequential); "
            "peers: their in-process drain, the figure issue 38's goal compares with",
            "jobs/s",
        ),
        Row(
            "push_drain_jobs_per_s",
            f"drain, push to a local receiver (concurrency {PUSH_CONCURRENCY})",
            f"drain {drain_n} no-op jobs by push delivery: serve --mode all --push-allow-cidrs "
            f"127.0.0.0/8, an endpoint of concurrency {PUSH_CONCURRENCY} bound to the queue, whose URL is "
            "an aiohttp receiver in its own process answering 200 {} on keep-alive connections (P; "
            "its CPU is not counted as the server's). QueueFlow only: the Rust server and the peers "
            "have no push delivery, so no figure and no ratio",
            "jobs/s",
            ratio=False,
        ),
        Row(
            PUSH_RATIO,
            "push drain / remote one complete per job (QF)",
            "the row above over the remote drain with one complete per job in order, QueueFlow's, "
            "each run's two figures taken in the same run (issue 39's speed goal: at least 1)",
            "x",
            ratio=False,
        ),
        Row(
            "remote_drain_jobs_per_s",
            "drain, remote HTTP, per-job completes sent together",
            f"{remote}, one complete call per job, a lease's calls sent concurrently (QueueFlow and the "
            "Rust server, W1a)",
            "jobs/s",
        ),
        Row(
            "remote_batch_drain_jobs_per_s",
            "drain, remote HTTP, batch ack",
            f"{remote}, each lease acknowledged with one POST /api/v1/jobs/complete (W1a --remote-ack "
            "batch; the Rust server has no such route); peers: their in-process drain, the figure "
            "goal 2 compares with",
            "jobs/s",
        ),
        Row(
            "remote_sdk_drain_jobs_per_s",
            "drain, remote HTTP, Python SDK loops",
            f"drain {drain_n} no-op jobs through the Python SDK's worker loop: {REMOTE_PROCESSES} client "
            f"processes x {REMOTE_LOOPS} workers, concurrency and batch {REMOTE_BATCH} (QueueFlow, W1a "
            "--remote-client sdk); peers: their in-process drain, as above",
            "jobs/s",
        ),
        Row(
            "remote_gosdk_drain_jobs_per_s",
            "drain, remote HTTP, Go SDK loops",
            f"as above with the Go SDK's worker loop (bench/gosdk): {REMOTE_PROCESSES} client processes x "
            f"{REMOTE_LOOPS} workers, concurrency and batch {REMOTE_BATCH} (QueueFlow, W1a --remote-client "
            "go-sdk); peers: their in-process drain",
            "jobs/s",
        ),
        Row(
            "remote_rustsdk_drain_jobs_per_s",
            "drain, remote HTTP, Rust SDK loops",
            f"as above with the Rust SDK's worker loop (its bench_worker example, tokio multi-threaded): "
            f"{REMOTE_PROCESSES} client processes x {REMOTE_LOOPS} workers, concurrency and batch "
            f"{REMOTE_BATCH} (QueueFlow, W1a --remote-client rust-sdk); peers: their in-process drain",
            "jobs/s",
        ),
        Row(
            "enqueue_jobs_per_s",
            "batch enqueue, 1,000 per call",
            "batch enqueue, 1,000 jobs per call, one call at a time (QueueFlow: POST /jobs/batch, E)",
            "jobs/s",
        ),
        Row(
            "single_enqueue_jobs_per_s",
            "single POST /jobs, 16 clients",
            "single POST /api/v1/jobs, 16 concurrent clients (QueueFlow and the Rust server, E)",
            "jobs/s",
        ),
        Row(
            "latency_p50_ms",
            "latency p50 (QF: 16 parked x 50)",
            f"{latency}, p50; QueueFlow and the Rust server: 16 loops parked in long-poll leasing up "
            "to 50 (W2)",
            "ms",
        ),
        Row(
            "latency_p99_ms",
            "latency p99 (QF: 16 parked x 50)",
            f"{latency}, p99; QueueFlow as above",
            "ms",
        ),
        Row(
            "latency_200_p50_ms",
            "latency p50 (QF: 200 parked x 50)",
            f"{latency}, p50; QueueFlow: 200 loops parked leasing up to 50; peers: the same measurement "
            "as the rows above (they have one configuration)",
            "ms",
        ),
        Row(
            "latency_200_p99_ms",
            "latency p99 (QF: 200 parked x 50)",
            f"{latency}, p99; QueueFlow with 200 parked; peers as above",
            "ms",
        ),
        Row(
            "commit_p50_ms",
            "noise: commit p50 before drain",
            "durable 1-row commit p50 on the run's database right before the drain (the machine's "
            "commit latency at that moment; not a figure of any system)",
            "ms",
            ratio=False,
        ),
    ]


# --- summaries, ratios, the table (pure functions; tests/bench/test_compare.py) ----------------------


def summarize_rows(
    per_run: dict[str, list[dict[str, float]]], table_rows: Sequence[Row]
) -> list[dict[str, Any]]:
    """For each row: every system's summary (median, min, max, runs) or None, and QueueFlow / peer
    of the medians for each peer that has the figure (when QueueFlow has it too)."""
    out = []
    for row in table_rows:
        values: dict[str, dict[str, Any] | None] = {}
        for system, runs in per_run.items():
            got = [
                r[row.key]
                for r in runs
                if isinstance(r.get(row.key), int | float) and math.isfinite(r[row.key])
            ]
            values[system] = summarize(got) if got else None
        ratios: dict[str, float | None] = {}
        qf = values.get(QF)
        if row.ratio and qf is not None:
            for system, summary in values.items():
                if system == QF:
                    continue
                ok = summary is not None and summary["median"] not in (0, 0.0)
                ratios[system] = qf["median"] / summary["median"] if ok else None
        out.append(
            {
                "key": row.key,
                "name": row.name,
                "description": row.description,
                "unit": row.unit,
                "values": values,
                "ratios": ratios,
            }
        )
    return out


def cell(summary: dict[str, Any] | None) -> str:
    """'median (min-max)', or just the median for one run, or '-' when there is no figure."""
    if summary is None:
        return "-"
    if len(summary["runs"]) == 1:
        return fmt(summary["median"])
    return f"{fmt(summary['median'])} ({fmt(summary['min'])}-{fmt(summary['max'])})"


def ratio_cell(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}"


def _columns(systems: Sequence[str]) -> tuple[list[str], list[str]]:
    """The header, and the peers that get a ratio column (all of them, when QueueFlow is there)."""
    ratio_peers = [s for s in systems if s != QF] if QF in systems else []
    return ["figure", "unit", *systems, *(f"QF/{p}" for p in ratio_peers)], ratio_peers


def _cells(r: dict[str, Any], systems: Sequence[str], ratio_peers: Sequence[str]) -> list[str]:
    return [
        r["name"],
        r["unit"],
        *(cell(r["values"].get(s)) for s in systems),
        *(ratio_cell(r["ratios"].get(p)) for p in ratio_peers),
    ]


def table(summary_rows: Sequence[dict[str, Any]], systems: Sequence[str]) -> str:
    """The comparison as an aligned text table (figures right-aligned)."""
    header, ratio_peers = _columns(systems)
    lines = [header, *(_cells(r, systems, ratio_peers) for r in summary_rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]

    def render(line: list[str]) -> str:
        return "  ".join(
            c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(line)
        ).rstrip()

    return "\n".join([render(lines[0]), "  ".join("-" * w for w in widths), *(render(x) for x in lines[1:])])


def markdown(summary_rows: Sequence[dict[str, Any]], systems: Sequence[str]) -> str:
    """The same table in Markdown, for docs/benchmarks.md."""
    header, ratio_peers = _columns(systems)
    align = ["---", "---", *(["---:"] * (len(header) - 2))]
    lines = [header, align, *(_cells(r, systems, ratio_peers) for r in summary_rows)]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def rotation(systems: Sequence[str], run_no: int) -> list[str]:
    """The order of run `run_no` (1-based): the list rotated by run_no - 1."""
    k = (run_no - 1) % len(systems)
    return [*systems[k:], *systems[:k]]


def last_json_line(text: str) -> dict[str, Any]:
    """The last line of a program's output that parses as a JSON object."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict):
                    return value
    raise ValueError("no JSON result line in the output")


# --- measurements ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Step:
    """One measurement of one system: `run()` gives its raw result, `extract` the table's values."""

    name: str
    run: Callable[[], Awaitable[dict[str, Any]]]
    extract: Callable[[dict[str, Any]], dict[str, float]]


def queueflow_steps(ctx: Context, run_no: int, workers: int, upstream: Path | None = None) -> list[Step]:
    """QueueFlow's measurements, or with `upstream` (its binary) the Rust server's: the same
    scenarios with that server in place of QueueFlow's, but for the SDK loops."""
    ctx = dataclasses.replace(ctx, upstream=upstream)

    def scenario(name: str, **params: Any) -> Callable[[], Awaitable[dict[str, Any]]]:
        return lambda: SCENARIOS[name].run(dataclasses.replace(ctx, **params), run_no)

    def latency(prefix: str) -> Callable[[dict[str, Any]], dict[str, float]]:
        return lambda r: {f"{prefix}_p50_ms": r["client_p50_ms"], f"{prefix}_p99_ms": r["client_p99_ms"]}

    shapes = [s for s in REMOTE_SHAPES if upstream is None or "remote_client" not in s[2]]
    steps = [
        Step(
            f"W1b --workers {workers}",
            scenario("W1b", drain_workers=(workers,)),
            lambda r: {
                "drain_jobs_per_s": r[f"w{workers}_jobs_per_s"],
                "commit_p50_ms": r[f"w{workers}_commit_p50_ms"],
            },
        ),
        Step(
            "W1b, no tuning flag",
            scenario("W1b", drain_workers=(), drain_untuned=True),
            lambda r: {"drain_default_jobs_per_s": r["default_jobs_per_s"]},
        ),
        Step(
            "W1b, no tuning flag, removing queue",
            scenario("W1b", drain_workers=(), drain_untuned=True, drain_removing=True),
            lambda r: {"drain_remove_jobs_per_s": r["remove_default_jobs_per_s"]},
        ),
        *(
            Step(
                f"W1a {REMOTE_PROCESSES} processes x {REMOTE_LOOPS} {shape} x max_jobs {REMOTE_BATCH}",
                scenario(
                    "W1a",
                    remote_processes=REMOTE_PROCESSES,
                    remote_loops=REMOTE_LOOPS,
                    remote_batch=REMOTE_BATCH,
                    **params,
                ),
                lambda r, key=key: {key: r["jobs_per_s"]},
            )
            for key, shape, params in shapes
        ),
        *(
            []
            if upstream is not None  # it has no push delivery
            else [
                Step(
                    f"P concurrency {PUSH_CONCURRENCY}",
                    scenario("P", push_concurrency=(PUSH_CONCURRENCY,)),
                    lambda r: {"push_drain_jobs_per_s": r[f"c{PUSH_CONCURRENCY}_jobs_per_s"]},
                )
            ]
        ),
        Step(
            "E",
            scenario("E"),
            lambda r: {
                "enqueue_jobs_per_s": r["batch_jobs_per_s"],
                "single_enqueue_jobs_per_s": r["single_jobs_per_s"],
            },
        ),
    ]
    for prefix, (loops, max_jobs) in LATENCY_SHAPES.items():
        steps.append(
            Step(
                f"W2 {loops} parked x max_jobs {max_jobs}",
                scenario("W2", latency_loops=loops, latency_max_jobs=max_jobs, latency_slow_phase=False),
                latency(prefix),
            )
        )
    return steps


def peer_sizes(quick: bool) -> dict[str, list[str]]:
    """Each peer workload's size arguments: the same N as QueueFlow's scenarios use."""
    return {
        "drain": ["--jobs", str(2_000 if quick else 20_000), "--batch-size", "1000"],
        "enqueue": ["--batches", str(5 if quick else 20), "--batch-size", "1000"],
        "latency": ["--jobs", str(200 if quick else 2_000), "--interval-ms", str(LATENCY_INTERVAL_MS)],
    }


async def run_peer(ctx: Context, system: str, figure: str, run_no: int) -> dict[str, Any]:
    """One peer workload in a fresh database: its JSON result plus the commit probe taken before."""
    slug = system.lower().replace("-", "")
    async with ctx.database(f"{slug}_{figure}") as dsn:
        probe = await probe_commits(dsn)
        argv = [*peers.command(system), "--dsn", dsn, "--figure", figure, *peer_sizes(ctx.quick)[figure]]
        log = ctx.log_dir / f"{slug}-{figure}-run{run_no}.log"
        proc = harness.client(argv, log, f"{system} {figure}")
        code: int | None = None
        try:
            code = await proc.wait(within=PEER_TIMEOUT_SECS)
        except TimeoutError:
            pass
        finally:
            await harness.stop(proc)
        text = proc.log_text()
        if code != 0:
            why = "timed out" if code is None else f"exited with {code}"
            raise RuntimeError(f"{system} {figure} {why}; see {log}:\n{text[-2000:]}")
        return {**last_json_line(text), **probe}


def peer_steps(ctx: Context, system: str, run_no: int) -> list[Step]:
    def go(figure: str) -> Callable[[], Awaitable[dict[str, Any]]]:
        return lambda: run_peer(ctx, system, figure, run_no)

    def latency(r: dict[str, Any]) -> dict[str, float]:
        # One configuration, one measurement: it stands beside both of QueueFlow's shapes.
        return {
            "latency_p50_ms": r["p50_ms"],
            "latency_p99_ms": r["p99_ms"],
            "latency_200_p50_ms": r["p50_ms"],
            "latency_200_p99_ms": r["p99_ms"],
        }

    return [
        Step(
            "drain",
            go("drain"),
            # Their one in-process drain stands beside each of QueueFlow's in-process shapes, and
            # issue 11's goal 2 and issue 38's set QueueFlow's remote drains beside it too.
            lambda r: {
                "drain_jobs_per_s": r["jobs_per_s"],
                "drain_default_jobs_per_s": r["jobs_per_s"],
                "drain_remove_jobs_per_s": r["jobs_per_s"],
                "remote_serial_drain_jobs_per_s": r["jobs_per_s"],
                "remote_batch_drain_jobs_per_s": r["jobs_per_s"],
                "remote_sdk_drain_jobs_per_s": r["jobs_per_s"],
                "remote_gosdk_drain_jobs_per_s": r["jobs_per_s"],
                "remote_rustsdk_drain_jobs_per_s": r["jobs_per_s"],
                "commit_p50_ms": r["commit_p50_ms"],
            },
        ),
        Step("enqueue", go("enqueue"), lambda r: {"enqueue_jobs_per_s": r["jobs_per_s"]}),
        Step("latency", go("latency"), latency),
    ]


def derived(values: dict[str, float]) -> dict[str, float]:
    """Figures computed from one run's others: the push drain over the remote drain with one
    complete per job (both of the same run), where there are both."""
    push, serial = values.get("push_drain_jobs_per_s"), values.get("remote_serial_drain_jobs_per_s")
    if push is None or not serial:
        return {}
    return {PUSH_RATIO: push / serial}


def system_steps(
    ctx: Context, system: str, run_no: int, qf_workers: int, upstream: Path | None
) -> list[Step]:
    if system == QF:
        return queueflow_steps(ctx, run_no, qf_workers)
    if system == UPSTREAM:
        assert upstream is not None, "the Rust server is measured only once it is built"
        return queueflow_steps(ctx, run_no, qf_workers, upstream)
    return peer_steps(ctx, system, run_no)


async def measure(
    ctx: Context, systems: Sequence[str], runs: int, qf_workers: int, upstream: Path | None = None
) -> tuple[dict[str, list[dict[str, float]]], list[dict[str, Any]]]:
    """Every run of every system, interleaved. Returns the table's values per system per run, and
    the raw record of each run (order, each step's raw result, error or reason it was skipped)."""
    per_run: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    record: list[dict[str, Any]] = []
    for run_no in range(1, runs + 1):
        order = rotation(systems, run_no)
        entry: dict[str, Any] = {"run": run_no, "order": order, "systems": {}}
        for system in order:
            steps = system_steps(ctx, system, run_no, qf_workers, upstream)
            values: dict[str, float] = {}
            raw: dict[str, Any] = {}
            errors: dict[str, str] = {}
            skipped: dict[str, str] = {}
            for step in steps:
                started = time.monotonic()
                print(f"[compare] run {run_no}/{runs}: {system} {step.name} ...", file=sys.stderr, flush=True)
                try:
                    result = await step.run()
                    got = step.extract(result)
                except Unsupported as why:  # the server lacks what it needs: a note, not a failure
                    skipped[step.name] = str(why)
                    print(f"[compare] {system} {step.name} skipped: {why}", file=sys.stderr, flush=True)
                    continue
                except Exception as exc:  # one failed measurement must not lose the others
                    errors[step.name] = f"{type(exc).__name__}: {exc}"
                    print(f"[compare] {system} {step.name} FAILED: {exc}", file=sys.stderr, flush=True)
                    continue
                values.update(got)
                raw[step.name] = result
                shown = ", ".join(f"{k}={v:.4g}" for k, v in got.items())
                print(
                    f"[compare]   done in {time.monotonic() - started:.1f}s: {shown}",
                    file=sys.stderr,
                    flush=True,
                )
            values.update(derived(values))
            per_run[system].append(values)
            entry["systems"][system] = {"values": values, "raw": raw, "errors": errors, "skipped": skipped}
        record.append(entry)
    return per_run, record


def server_config(system: str, qf_workers: int) -> dict[str, Any]:
    """What QueueFlow's scenarios ran for QueueFlow or the Rust server, and on which clock."""
    api_side = "--mode api + --mode janitor" if system == QF else "--mode api (it runs its janitor)"
    return {
        "config": {
            "drain": f"--mode all --workers {qf_workers}; --mode all; --mode all on a removing queue (W1b)",
            "remote_drain": f"{api_side}; {REMOTE_PROCESSES} client processes x {REMOTE_LOOPS} loops, "
            f"max_jobs {REMOTE_BATCH}; per-job completes in order, per-job completes together, batch ack (W1a)",
            **(
                {
                    "push_drain": f"--mode all --push-allow-cidrs 127.0.0.0/8, endpoint concurrency "
                    f"{PUSH_CONCURRENCY}, a local aiohttp receiver answering 200 {{}} (P)"
                }
                if system == QF
                else {}
            ),
            "enqueue": "--mode api; POST /jobs/batch with 1,000 jobs (E)",
            "latency": f"{api_side}; "
            + "; ".join(f"{n} loops parked, max_jobs {m}" for n, m in LATENCY_SHAPES.values())
            + " (W2, 5 ms phase, client clock)",
        },
        "clocks": {
            "drain": "db (a removing queue: a statement trigger's)",
            "remote_drain": "db",
            **({"push_drain": "db"} if system == QF else {}),
            "enqueue": "process (client)",
            "latency": "process (client)",
        },
    }


def system_info(
    record: list[dict[str, Any]], qf_workers: int, upstream: Path | None = None
) -> dict[str, Any]:
    """Version, runtime and configuration of each system, as the runs reported them."""
    info: dict[str, Any] = {}
    for entry in record:
        for system, got in entry["systems"].items():
            if system in info:
                continue
            if system == QF:
                info[QF] = {
                    "version": importlib.metadata.version("queueflow-server"),
                    "runtime": f"python {platform.python_version()}",
                    "commit": _git_head(),
                    **server_config(QF, qf_workers),
                }
                continue
            if system == UPSTREAM:
                info[UPSTREAM] = {
                    "version": peers.rust_server_version(upstream) if upstream else None,
                    "runtime": f"rust, release build of crates.io {peers.RUST_SERVER_CRATE} (cargo install --locked)",
                    "binary": str(upstream),
                    **server_config(UPSTREAM, qf_workers),
                }
                continue
            for result in got["raw"].values():
                info[system] = {k: result.get(k) for k in ("version", "runtime", "config")}
                info[system]["clocks"] = {step: r.get("clock") for step, r in got["raw"].items()}
                break
    return info


def _git_head() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip() or None
    return None


# --- the command -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="smoke check: small N and one run")
    p.add_argument("--runs", type=int, default=None, help="runs per system (default 3; 1 with --quick)")
    p.add_argument(
        "--systems",
        default="qf,rust,graphile,pgboss,pgqueuer",
        help="comma-separated, in run-1 order: qf, rust (upstream's Rust server), graphile, pgboss, "
        "pgqueuer (default: all five; the Rust server is skipped with a note where it was not built)",
    )
    p.add_argument(
        "--qf-workers", type=int, default=16, help="QueueFlow's --workers for the in-process drain"
    )
    p.add_argument("--out", type=Path, default=harness.OUT_DIR / "compare.json", help="results JSON path")
    p.add_argument("--markdown", action="store_true", help="print --out as a Markdown table and exit")
    args = p.parse_args(argv)
    try:
        args.systems = chosen_systems(args.systems)
    except ValueError as err:
        p.error(str(err))
    args.runs = args.runs or (1 if args.quick else 3)
    return args


def chosen_systems(text: str) -> list[str]:
    """The systems a `--systems` value names (comma-separated, any of NAMES), in its order, each
    once; ValueError for an unknown name or none."""
    chosen: list[str] = []
    for name in (x.strip().lower() for x in text.split(",") if x.strip()):
        if name not in NAMES:
            raise ValueError(f"unknown system {name!r} (choose from qf, rust, graphile, pgboss, pgqueuer)")
        if NAMES[name] not in chosen:
            chosen.append(NAMES[name])
    if not chosen:
        raise ValueError("--systems names none")
    return chosen


def with_rust_server(systems: Sequence[str]) -> tuple[list[str], Path | None, dict[str, str]]:
    """The systems to measure, the Rust server's binary (None when it is not among them or was
    not built), and {system: why} for a chosen system that cannot be measured."""
    if UPSTREAM not in systems:
        return list(systems), None, {}
    try:
        return list(systems), peers.rust_server(), {}
    except FileNotFoundError as exc:
        return [s for s in systems if s != UPSTREAM], None, {UPSTREAM: str(exc)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.markdown:
        data = load_results(args.out)
        print(markdown(data.get("rows", []), data.get("meta", {}).get("systems", [])))
        return 0
    try:
        commands = {s: peers.command(s) for s in args.systems if s not in SERVERS}
    except FileNotFoundError as exc:
        print(f"[compare] {exc}", file=sys.stderr)
        return 2
    args.systems, upstream, not_measured = with_rust_server(args.systems)
    for system, why in not_measured.items():
        print(f"[compare] skipping {system}: {why}", file=sys.stderr, flush=True)
    log_dir = args.out.parent / "compare-logs"
    harness.begin(log_dir)
    started = time.monotonic()
    try:
        with harness.cluster("qfcompare-pg-") as pg:
            ctx = Context(pg=pg, quick=args.quick, log_dir=log_dir, out_dir=args.out.parent)
            pg_settings = asyncio.run(probes.pg_settings(pg))
            per_run, record = asyncio.run(measure(ctx, args.systems, args.runs, args.qf_workers, upstream))
    except KeyboardInterrupt:
        print("\n[compare] interrupted; every process this harness started has been stopped", file=sys.stderr)
        return 130

    summary_rows = summarize_rows(per_run, rows(args.quick))
    node = peers.node_binary() if {"graphile-worker", "pg-boss"} & set(commands) else None
    meta = {
        **probes.run_meta(started, args.quick, args.runs),
        "systems": args.systems,
        "order_per_run": [entry["order"] for entry in record],
        "versions": system_info(record, args.qf_workers, upstream),
        "not_measured": not_measured,
        "node": {"path": str(node), "version": ".".join(map(str, peers.node_version(node) or ()))}
        if node
        else None,
        "postgres": pg_settings,
        "notes": "clients, servers, workers and PostgreSQL share the same cores; medians of the runs",
    }
    data = {"meta": meta, "rows": summary_rows, "runs": record}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")

    print(
        "QueueFlow beside upstream's Rust server and its peers: "
        f"{'QUICK smoke check, ' if args.quick else ''}{args.runs} run(s) per figure, median (min-max)\n"
        f"PostgreSQL {pg_settings.get('server_version')} embedded, "
        f"fsync={pg_settings.get('fsync')}, synchronous_commit={pg_settings.get('synchronous_commit')}; "
        f"{os.cpu_count()} CPU cores shared by everything. QF/X = QueueFlow's median / system X's: "
        "above 1 means QueueFlow is faster for jobs/s and slower for ms.\n"
    )
    print(table(summary_rows, args.systems))
    print()
    for r in summary_rows:
        print(f"- {r['name']}: {r['description']}")
    for system, v in meta["versions"].items():
        clocks = ", ".join(f"{k} {c}" for k, c in v.get("clocks", {}).items())
        print(
            f"- {system} {v.get('version')} ({v.get('runtime')}; clocks: {clocks}): {json.dumps(v.get('config'))}"
        )
    failures = [
        (entry["run"], system, step, err)
        for entry in record
        for system, got in entry["systems"].items()
        for step, err in got["errors"].items()
    ]
    for system, why in not_measured.items():
        print(f"- {system}: not measured: {why}")
    skips = {
        (system, step): why
        for entry in record
        for system, got in entry["systems"].items()
        for step, why in got["skipped"].items()
    }
    for (system, step), why in skips.items():
        print(f"- {system} {step}: skipped: {why}")
    for run_no, system, step, err in failures:
        print(f"\n[compare] FAILED in run {run_no}: {system} {step}: {err.splitlines()[0] if err else ''}")
    print(f"\n[compare] {time.monotonic() - started:.0f}s total; results in {args.out}; logs in {log_dir}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
