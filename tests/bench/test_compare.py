"""bench.compare's arithmetic and presentation on canned numbers: no PostgreSQL, no processes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench import compare
from bench.compare import QF, Row
from bench.context import Context

ROWS = [
    Row("drain_jobs_per_s", "drain", "drain, long", "jobs/s"),
    Row("latency_p50_ms", "latency p50", "latency, long", "ms"),
    Row("remote_drain_jobs_per_s", "remote drain", "QueueFlow only", "jobs/s"),
    Row("commit_p50_ms", "noise", "commit probe", "ms", ratio=False),
]

PER_RUN = {
    QF: [
        {
            "drain_jobs_per_s": 3000.0,
            "latency_p50_ms": 4.0,
            "remote_drain_jobs_per_s": 2000.0,
            "commit_p50_ms": 0.3,
        },
        {
            "drain_jobs_per_s": 5000.0,
            "latency_p50_ms": 2.0,
            "remote_drain_jobs_per_s": 2200.0,
            "commit_p50_ms": 0.2,
        },
        {
            "drain_jobs_per_s": 4000.0,
            "latency_p50_ms": 3.0,
            "remote_drain_jobs_per_s": 2100.0,
            "commit_p50_ms": 0.4,
        },
    ],
    "pg-boss": [
        {"drain_jobs_per_s": 2000.0, "latency_p50_ms": 6.0, "commit_p50_ms": 0.3},
        {"drain_jobs_per_s": 1000.0, "latency_p50_ms": 6.0, "commit_p50_ms": 0.3},
        # a failed latency measurement in run 3: the row is summarised over the runs that have it
        {"drain_jobs_per_s": 3000.0, "commit_p50_ms": 0.3},
    ],
}


def by_key(summary_rows):
    return {r["key"]: r for r in summary_rows}


def test_medians_min_max_and_runs_per_system():
    rows = by_key(compare.summarize_rows(PER_RUN, ROWS))
    qf = rows["drain_jobs_per_s"]["values"][QF]
    assert (qf["median"], qf["min"], qf["max"], qf["runs"]) == (
        4000.0,
        3000.0,
        5000.0,
        [3000.0, 5000.0, 4000.0],
    )
    boss = rows["latency_p50_ms"]["values"]["pg-boss"]
    assert (boss["median"], boss["runs"]) == (6.0, [6.0, 6.0])


def test_ratio_is_queueflow_median_over_peer_median():
    rows = by_key(compare.summarize_rows(PER_RUN, ROWS))
    assert rows["drain_jobs_per_s"]["ratios"] == {"pg-boss": pytest.approx(2.0)}
    assert rows["latency_p50_ms"]["ratios"] == {"pg-boss": pytest.approx(0.5)}


def test_no_ratio_where_a_side_has_no_figure_or_the_row_has_none():
    rows = by_key(compare.summarize_rows(PER_RUN, ROWS))
    assert rows["remote_drain_jobs_per_s"]["values"]["pg-boss"] is None
    assert rows["remote_drain_jobs_per_s"]["ratios"] == {"pg-boss": None}
    assert rows["commit_p50_ms"]["ratios"] == {}


def test_no_ratio_without_queueflow_and_non_finite_values_are_ignored():
    rows = by_key(compare.summarize_rows({"pg-boss": [{"drain_jobs_per_s": float("nan")}]}, ROWS))
    assert rows["drain_jobs_per_s"]["values"] == {"pg-boss": None}
    assert rows["drain_jobs_per_s"]["ratios"] == {}


def test_cells_show_median_with_range_only_for_several_runs():
    assert compare.cell(None) == "-"
    assert (
        compare.cell({"median": 4000.0, "min": 3000.0, "max": 5000.0, "runs": [1, 2, 3]})
        == "4,000 (3,000-5,000)"
    )
    assert compare.cell({"median": 2.5, "min": 2.5, "max": 2.5, "runs": [2.5]}) == "2.50"
    assert compare.ratio_cell(None) == "-"
    assert compare.ratio_cell(1.234) == "1.23"


def test_text_table_has_a_column_per_system_and_a_ratio_column_per_peer():
    text = compare.table(compare.summarize_rows(PER_RUN, ROWS), [QF, "pg-boss"])
    header, rule, drain, latency, remote, noise = text.splitlines()
    assert header.split() == ["figure", "unit", "QueueFlow", "pg-boss", "QF/pg-boss"]
    assert set(rule.replace(" ", "")) == {"-"}
    assert drain.split()[-5:] == ["4,000", "(3,000-5,000)", "2,000", "(1,000-3,000)", "2.00"]
    assert latency.split()[-4:] == ["(2.00-4.00)", "6.00", "(6.00-6.00)", "0.50"]
    assert remote.split()[-2:] == ["-", "-"]
    assert noise.split()[-1] == "-"


def test_markdown_table_matches_the_text_table():
    md = compare.markdown(compare.summarize_rows(PER_RUN, ROWS), [QF, "pg-boss"]).splitlines()
    assert md[0] == "| figure | unit | QueueFlow | pg-boss | QF/pg-boss |"
    assert md[1] == "| --- | --- | ---: | ---: | ---: |"
    assert md[2] == "| drain | jobs/s | 4,000 (3,000-5,000) | 2,000 (1,000-3,000) | 2.00 |"
    assert len(md) == 2 + len(ROWS)


def test_runs_rotate_the_order_of_the_systems():
    systems = list(compare.SYSTEMS)
    assert compare.rotation(systems, 1) == systems
    assert compare.rotation(systems, 2) == [*systems[1:], systems[0]]
    assert compare.rotation(systems, len(systems) + 1) == systems


def test_the_result_is_the_last_json_object_line_of_the_output():
    out = 'starting\n{"not": "this"}\n[warning] noise\n{"jobs_per_s": 12.5}\ntrailing words\n'
    assert compare.last_json_line(out) == {"jobs_per_s": 12.5}
    with pytest.raises(ValueError, match="no JSON"):
        compare.last_json_line("no result here\n{broken\n")


def test_system_names_and_defaults():
    args = compare.parse_args(["--systems", "pgqueuer, QF,graphile,qf,rust"])
    assert args.systems == ["PgQueuer", QF, "graphile-worker", compare.UPSTREAM]
    assert args.runs == 3
    assert compare.parse_args(["--quick"]).runs == 1
    assert compare.parse_args([]).systems == list(compare.SYSTEMS)
    with pytest.raises(SystemExit):
        compare.parse_args(["--systems", "sidekiq"])


def test_queueflow_fills_every_row_the_rust_server_all_but_the_sdk_loops_and_each_peer_its_own():
    ctx = Context(pg=None, quick=True, log_dir=Path("."), out_dir=Path("."))  # type: ignore[arg-type]
    canned = {
        "w16_jobs_per_s": 1.0,
        "w16_commit_p50_ms": 0.3,
        "default_jobs_per_s": 1.5,
        "remove_default_jobs_per_s": 1.7,
        "jobs_per_s": 2.0,
        "batch_jobs_per_s": 3.0,
        "single_jobs_per_s": 3.5,
        "client_p50_ms": 4.0,
        "client_p99_ms": 5.0,
        "p50_ms": 6.0,
        "p99_ms": 7.0,
        "commit_p50_ms": 0.4,
        f"c{compare.PUSH_CONCURRENCY}_jobs_per_s": 2.5,
    }
    keys = {r.key for r in compare.rows(quick=False)} - {compare.PUSH_RATIO}  # derived, not measured
    qf = {k for step in compare.queueflow_steps(ctx, 1, 16) for k in step.extract(canned)}
    rust = {
        k for step in compare.queueflow_steps(ctx, 1, 16, Path("queueflow")) for k in step.extract(canned)
    }
    peer = {k for step in compare.peer_steps(ctx, "pg-boss", 1) for k in step.extract(canned)}
    sdk_rows = {
        "remote_sdk_drain_jobs_per_s",
        "remote_gosdk_drain_jobs_per_s",
        "remote_rustsdk_drain_jobs_per_s",
    }
    assert qf == keys
    assert rust == keys - sdk_rows - {"push_drain_jobs_per_s"}
    assert peer == keys - {"remote_drain_jobs_per_s", "single_enqueue_jobs_per_s", "push_drain_jobs_per_s"}


def test_the_push_drain_is_set_beside_the_remote_one_complete_per_job_drain_of_the_same_run():
    assert compare.derived({"push_drain_jobs_per_s": 3000.0, "remote_serial_drain_jobs_per_s": 2000.0}) == {
        compare.PUSH_RATIO: pytest.approx(1.5)
    }
    # a peer's (or the Rust server's) run has no push figure; a failed remote drain has none either
    assert compare.derived({"remote_serial_drain_jobs_per_s": 2000.0}) == {}
    assert compare.derived({"push_drain_jobs_per_s": 3000.0}) == {}
    order = [r.key for r in compare.rows(quick=False)]
    serial = order.index("remote_serial_drain_jobs_per_s")
    assert order[serial + 1 : serial + 3] == ["push_drain_jobs_per_s", compare.PUSH_RATIO]


def test_the_rust_server_runs_queueflows_scenarios_with_its_binary_in_place_of_queueflows_servers():
    ctx = Context(pg=None, quick=True, log_dir=Path("."), out_dir=Path("."))  # type: ignore[arg-type]
    binary = Path("/opt/rust/bin/queueflow")
    steps = compare.queueflow_steps(ctx, 1, 16, binary)
    assert [s.name for s in steps if "SDK" in s.name] == []
    server = dataclasses.replace(ctx, upstream=binary).server(
        "postgresql://x@127.0.0.1/db", "all", "--workers", "16"
    )
    assert server.argv[:3] == [str(binary), "serve", "--mode"]
    assert "--dev" in server.argv and server.argv[-2:] == ["--workers", "16"]
    assert "--host" not in server.argv  # it has no such flag
    assert len(dataclasses.replace(ctx, upstream=binary).api_side("postgresql://x@127.0.0.1/db")) == 1
    assert [p.mode for p in ctx.api_side("postgresql://x@127.0.0.1/db")] == ["api", "janitor"]


def test_the_peers_get_the_sizes_queueflow_scenarios_use():
    assert compare.peer_sizes(quick=False)["drain"][:2] == ["--jobs", "20000"]
    assert compare.peer_sizes(quick=False)["enqueue"][:2] == ["--batches", "20"]
    assert compare.peer_sizes(quick=True)["latency"][:2] == ["--jobs", "200"]
