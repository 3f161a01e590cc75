"""`python -m bench.soak` (`make soak`): run the soak and write its report.

The duration is `--minutes` (or SOAK_MINUTES; default 30). The result goes to
bench/out/soak/soak.json (everything, samples included) and bench/out/soak/soak.md (the report);
the servers' logs, the execution log and the final table rows (jobs.json) are beside them. Exit status 1 when a job was lost, a
duplicate execution is unexplained, or a completed job was never started.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from bench import harness
from bench.soak import execlog, verify
from bench.soak.run import Options, Soak


def parse_args(argv: list[str] | None) -> Options:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    p.add_argument("--minutes", type=float, default=float(env("SOAK_MINUTES", "30")), help="load duration")
    p.add_argument(
        "--kill-secs", type=float, default=float(env("SOAK_KILL_SECS", "120")), help="SIGKILL cadence"
    )
    p.add_argument("--sample-secs", type=float, default=12.0, help="RSS and connection sample cadence")
    p.add_argument("--single-per-sec", type=float, default=10.0, help="single enqueues per second")
    p.add_argument("--batch-every-secs", type=float, default=5.0, help="one batch enqueue this often")
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--workflow-every-secs", type=float, default=4.0, help="one 4-step workflow this often")
    p.add_argument("--sse-listeners", type=int, default=4)
    p.add_argument(
        "--drain-secs",
        type=float,
        default=450.0,
        help="longest wait for the backlog after the load (a killed worker's jobs wait about 390 s)",
    )
    p.add_argument(
        "--seed", type=int, default=int(env("SOAK_SEED", "13")), help="which process each kill picks"
    )
    p.add_argument("--out-dir", type=Path, default=harness.OUT_DIR / "soak")
    p.add_argument("--report-only", action="store_true", help="rewrite soak.md from soak.json; run nothing")
    args = vars(p.parse_args(argv))
    if args.pop("report_only"):
        print(verify.markdown(json.loads((args["out_dir"] / "soak.json").read_text())))
        sys.exit(0)
    return Options(**args)


async def soak(opts: Options, pg: object) -> dict[str, object]:
    cluster = pg.embedded  # type: ignore[attr-defined]
    dsn = await pg.create_database("soak")  # type: ignore[attr-defined]
    driver = Soak(opts, dsn, cluster.port, cluster.postmaster_pid())
    await driver.run()
    # The raw rows, so that the analysis can be run again on them (`--report-only` reads soak.json).
    (opts.out_dir / "jobs.json").write_text(json.dumps(driver.state.db, default=str))
    return verify.analyse(driver.state, execlog.read(driver.exec_log), opts)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    harness.begin(opts.out_dir / "logs")
    try:
        with harness.cluster("qfsoak-pg-") as pg:
            result = asyncio.run(soak(opts, pg))
    except KeyboardInterrupt:
        print("\n[soak] interrupted; every process it started has been stopped", file=sys.stderr)
        return 130
    (opts.out_dir / "soak.json").write_text(json.dumps(result, indent=1, default=str))
    report = verify.markdown(result)
    (opts.out_dir / "soak.md").write_text(report)
    print(report)
    print(f"[soak] results in {opts.out_dir}/soak.json and soak.md", file=sys.stderr)
    failed = (
        result["lost"]["count"]
        or result["duplicates"]["unexplained"]
        or result["completed_without_execution"]
    )  # type: ignore[index]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
