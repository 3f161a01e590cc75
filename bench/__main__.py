"""`python -m bench [SCENARIO ...] [--quick]`: run the benchmarks against real server processes.

Scenarios: W1 (= W1a + W1b), W1a, W1b, P, W2, W3, E, M, F, L, H, K; default: all of them but H. Each figure is the
median of --runs runs (default 3; --quick: smaller N and 1 run), with min and max beside it.
Results go to stdout as a table and to bench/out/results.json (merged per scenario).
See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import client, harness, peers, probes
from bench.context import Context, Scenario, Unsupported
from bench.report import ScenarioResult, load_results, markdown, reference_lookup, table, write_results
from bench.scenarios import ALIASES, SCENARIOS

RUST_SERVER_SCENARIOS = ("W1a", "W1b", "W2", "E")  # what upstream's Rust server can run (--rust-server)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help=f"any of {', '.join([*ALIASES, *SCENARIOS])} (default: all)",
    )
    p.add_argument("--quick", action="store_true", help="smoke check: smaller N and one run")
    p.add_argument("--runs", type=int, default=None, help="runs per scenario (default 3; 1 with --quick)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results JSON path (default bench/out/results.json; results-rust.json with --rust-server)",
    )
    p.add_argument("--drain-workers", default="4,16", help="W1b: comma-separated --workers values")
    p.add_argument(
        "--drain-untuned", action="store_true", help="W1b: also drain with `--mode all` and no tuning flag"
    )
    p.add_argument(
        "--drain-removing",
        action="store_true",
        help="W1b: on a queue set to remove finished jobs (bench.client.make_queue_remove_finished)",
    )
    p.add_argument("--remote-loops", type=int, default=8, help="W1a: concurrent remote worker loops")
    p.add_argument("--remote-batch", type=int, default=50, help="W1a: max_jobs per lease (1..100)")
    p.add_argument(
        "--remote-processes",
        type=int,
        default=0,
        help="W1a: run the loops in N client processes, --remote-loops in each (default 0: in the harness)",
    )
    p.add_argument(
        "--remote-ack",
        choices=client.ACKS,
        default="each",
        help="W1a raw loops: one complete call per job, a lease's calls sent together (each) or one after "
        "another, each answer awaited (sequential: the seed's protocol), or one batch call per lease",
    )
    p.add_argument(
        "--remote-client",
        choices=("raw", "sdk", "go-sdk", "rust-sdk", "ts-sdk"),
        default="raw",
        help="W1a: raw HTTP calls, or an SDK's worker loop: Python, Go, Rust, TypeScript (needs --remote-processes)",
    )
    p.add_argument(
        "--push-concurrency",
        default="300,10",
        help="P: comma-separated endpoint concurrency values, one push drain each",
    )
    p.add_argument("--latency-loops", type=int, default=4, help="W2: remote loops parked in long-poll")
    p.add_argument("--latency-max-jobs", type=int, default=1, help="W2: max_jobs of their lease calls")
    p.add_argument(
        "--rust-server",
        action="store_true",
        help="W1a, W1b, W2, E: measure upstream's Rust server (built by `make bench-peers`) instead",
    )
    p.add_argument(
        "--markdown",
        action="store_true",
        help="print the results in --out as a Markdown table and exit (runs nothing)",
    )
    p.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="DIR",
        help="attach py-spy to every server and write its flame graph to DIR/<mode>-<port>.svg",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="run the servers under cProfile (bench/out/profiles/*.prof); distorts the figures",
    )
    args = p.parse_args(argv)
    harness.FLAMEGRAPH_DIR = args.py_spy
    args.upstream = None
    if args.rust_server:
        try:
            args.upstream = peers.rust_server()
        except FileNotFoundError as exc:
            p.error(f"--rust-server: {exc}")
    if args.out is None:
        args.out = harness.OUT_DIR / ("results-rust.json" if args.rust_server else "results.json")
    wanted: list[str] = []
    for name in args.scenarios or list(ALIASES["all"]):
        key = next((k for k in [*ALIASES, *SCENARIOS] if k.lower() == name.lower()), None)
        if key is None:
            p.error(f"unknown scenario {name!r}")
        for s in ALIASES.get(key, (key,)):
            if s not in wanted:
                wanted.append(s)
    args.selected = [s for s in SCENARIOS if s in wanted]  # canonical order
    if args.rust_server and set(args.selected) - set(RUST_SERVER_SCENARIOS):
        p.error(f"--rust-server runs {', '.join(RUST_SERVER_SCENARIOS)} only")
    args.runs = args.runs or (1 if args.quick else 3)
    return args


async def run_all(ctx: Context, scenarios: list[Scenario], runs: int) -> list[ScenarioResult]:
    results = []
    for sc in scenarios:
        figures = sc.figures(ctx)
        per_run = []
        digests = []
        for run_no in range(1, runs + 1):
            digests.append(harness.source_digest())
            started = time.monotonic()
            print(f"[bench] {sc.name} run {run_no}/{runs} ...", file=sys.stderr, flush=True)
            try:
                values = await sc.run(ctx, run_no)
            except Unsupported as why:
                print(f"[bench] {sc.name} skipped: {why}", file=sys.stderr, flush=True)
                break
            per_run.append(values)
            shown = ", ".join(f"{f.key}={values[f.key]:.4g}" for f in figures if f.key in values)
            print(
                f"[bench] {sc.name} run {run_no} done in {time.monotonic() - started:.1f}s: {shown}",
                file=sys.stderr,
                flush=True,
            )
        if not per_run:
            continue
        results.append(
            ScenarioResult(
                sc.name,
                sc.title,
                figures,
                per_run,
                {
                    "quick": ctx.quick,
                    "runs": runs,
                    "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "server_source_digest_per_run": digests,
                },
            )
        )
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.markdown:
        print(markdown(load_results(args.out)))
        return 0
    out_dir: Path = args.out.parent
    log_dir = out_dir / "logs"
    nofile = harness.begin(log_dir)
    digest_at_start = harness.source_digest()
    started = time.monotonic()
    try:
        pg_settings, results = measure(args, log_dir, out_dir)
    except KeyboardInterrupt:
        print("\n[bench] interrupted; every process this harness started has been stopped", file=sys.stderr)
        return 130

    meta = {
        **probes.run_meta(started, args.quick, args.runs),
        "scenarios_run": args.selected,
        "postgres": pg_settings,
        "client_nofile_limit": nofile,
        "server_source_digest": {"start": digest_at_start, "end": harness.source_digest()},
        "servers_killed_after_ignoring_sigterm": harness.UNCLEAN_EXITS,
        "notes": "client, server and PostgreSQL share the same cores; figures are medians of the runs",
    }
    if args.profile:
        summarize_profiles(out_dir / "profiles")
    data = write_results(args.out, meta, results)
    refs = reference_lookup({k: v for k, v in data["scenarios"].items() if k == "L"})
    ref_note = None
    if "L" not in args.selected and refs:
        ref_note = (
            f"pgbench references are from an earlier L run ({data['scenarios']['L']['meta']['finished_at']})."
        )
    header = (
        f"QueueFlow benchmarks: {'QUICK smoke check, ' if args.quick else ''}{args.runs} run(s) per figure, "
        f"median [min, max]\n"
        f"PostgreSQL {pg_settings.get('server_version')} embedded, fsync={pg_settings.get('fsync')}, "
        f"synchronous_commit={pg_settings.get('synchronous_commit')} (durable defaults); "
        f"{os.cpu_count()} CPU cores shared by client, server and PostgreSQL\n"
    )
    print(header)
    print(table(results, refs, ref_note))
    if meta["server_source_digest"]["start"] != meta["server_source_digest"]["end"]:
        print(
            "\n[bench] WARNING: the server's source changed while the harness ran; later runs measured "
            "different code (see server_source_digest in the results)"
        )
    if harness.UNCLEAN_EXITS:
        print(
            f"\n[bench] processes that ignored SIGTERM and were killed: "
            f"{len(harness.UNCLEAN_EXITS)} ({', '.join(sorted(set(harness.UNCLEAN_EXITS)))})"
        )
    print(f"\n[bench] {time.monotonic() - started:.0f}s total; results in {args.out}; logs in {log_dir}")
    return 0


def measure(
    args: argparse.Namespace, log_dir: Path, out_dir: Path
) -> tuple[dict[str, str], list[ScenarioResult]]:
    """Run the selected scenarios on one embedded cluster; every process is stopped on the way out."""
    with harness.cluster("qfbench-pg-") as pg:
        ctx = Context(
            pg=pg,
            quick=args.quick,
            log_dir=log_dir,
            out_dir=out_dir,
            profile_dir=(out_dir / "profiles") if args.profile else None,
            drain_workers=tuple(int(x) for x in args.drain_workers.split(",") if x.strip()),
            drain_untuned=args.drain_untuned,
            drain_removing=args.drain_removing,
            remote_loops=args.remote_loops,
            remote_batch=args.remote_batch,
            remote_processes=args.remote_processes,
            remote_ack=args.remote_ack,
            remote_client=args.remote_client,
            push_concurrency=tuple(
                dict.fromkeys(int(x) for x in args.push_concurrency.split(",") if x.strip())
            ),
            latency_loops=args.latency_loops,
            latency_max_jobs=args.latency_max_jobs,
            upstream=args.upstream,
        )
        pg_settings = asyncio.run(probes.pg_settings(pg))
        return pg_settings, asyncio.run(run_all(ctx, [SCENARIOS[s] for s in args.selected], args.runs))


def summarize_profiles(directory: Path, top: int = 30) -> None:
    """Next to each server's .prof, a .txt with its top functions by own time and by cumulative time."""
    import io
    import pstats

    for prof in sorted(directory.glob("*.prof")):
        buf = io.StringIO()
        stats = pstats.Stats(str(prof), stream=buf).strip_dirs()
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        prof.with_suffix(".txt").write_text(buf.getvalue())
        print(f"[bench] profile summary: {prof.with_suffix('.txt')}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
