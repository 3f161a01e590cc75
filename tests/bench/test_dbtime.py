"""bench.dbtime's sorting of statements and its per-job arithmetic on canned rows: no PostgreSQL."""

from __future__ import annotations

import pytest

from bench import dbtime


def test_statement_text_drops_comments_and_folds_white_space():
    s = dbtime.statement(
        "-- Lease up to $2 jobs\nWITH flags AS (\n    SELECT 1) -- trailing\nSELECT *", 3, 30, 1.5
    )
    assert s.text == "WITH flags AS ( SELECT 1) SELECT *"
    assert (s.calls, s.rows, s.ms) == (3, 30, 1.5)


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("UPDATE queueflow.jobs j SET status = $4", "own"),
        ('COPY "queueflow"."jobs"("id") FROM STDIN (FORMAT binary)', "own"),
        ("select * from graphile_worker.add_jobs($1)", "own"),
        ("SELECT count(*) FROM queueflow.jobs WHERE status = $1", "harness"),
        ("select count(*)::int as n from graphile_worker._private_jobs", "harness"),
        ("UPDATE public.bench_probe SET v = v + $1 WHERE id = $2", "harness"),
        ("CREATE INDEX jobs_claim_idx ON queueflow.jobs (queue_name)", "setup"),
        ("DO $$ BEGIN PERFORM 1; END $$", "setup"),
        ("SET search_path = queueflow", "setup"),
        ("select set_config($1, $2, false)", "setup"),
        ("BEGIN", "transaction"),
        ("COMMIT", "transaction"),
        ("start transaction isolation level serializable", "transaction"),
        ("SELECT pg_notify($1, $2)", "own"),
    ],
)
def test_each_statement_is_the_systems_the_harnesss_set_up_or_transaction_control(query, kind):
    assert dbtime.statement(query, 1, 1, 1.0).kind == kind


def test_summary_sums_the_systems_own_statements_per_job_and_keeps_the_rest_apart():
    rows = [
        dbtime.statement("UPDATE jobs SET status = $1", 40, 20_000, 300.0),
        dbtime.statement("WITH claim AS (SELECT 1) UPDATE jobs SET x = 1", 40, 20_000, 500.0),
        dbtime.statement("COPY jobs FROM STDIN", 20, 20_000, 100.0),
        dbtime.statement("SELECT count(*) FROM jobs", 100, 100, 40.0),
        dbtime.statement("CREATE TABLE jobs (id int)", 1, 0, 20.0),
        dbtime.statement("COMMIT", 10, 0, 10.0),
    ]
    got = dbtime.summary("QueueFlow", 20_000, 25_000.0, rows, top=2)
    assert got["us_per_job"] == pytest.approx(1000 * 900.0 / 20_000)  # 45 us
    assert got["apart_us_per_job"] == pytest.approx({"transaction": 0.5, "setup": 1.0, "harness": 2.0})
    # the most expensive first, `top` of them, own statements only
    assert [s["text"] for s in got["statements"]] == [
        "WITH claim AS (SELECT 1) UPDATE jobs SET x = 1",
        "UPDATE jobs SET status = $1",
    ]
    assert got["statements"][0]["us_per_job"] == pytest.approx(25.0)
    text = dbtime.render(got)
    assert text.splitlines()[0] == (
        "QueueFlow: 25,000 jobs/s; statements 45.0 us per job (apart: transaction 0.5, setup 1.0, harness 2.0)"
    )
    assert "   25.0      40    20000  WITH claim AS (SELECT 1) UPDATE jobs SET x = 1" in text


def test_long_statements_are_cut_to_the_width():
    got = dbtime.summary(
        "pg-boss", 10, 1.0, [dbtime.statement("SELECT " + "x, " * 100 + "y", 1, 1, 1.0)], top=1
    )
    line = dbtime.render(got, width=40).splitlines()[-1]
    assert line.endswith("...") and len(line.split("  ")[-1]) == 40


def test_systems_are_named_as_bench_compare_names_them():
    args = dbtime.parse_args(["--systems", "graphile,qf,graphile-worker"])
    assert args.systems == ["graphile-worker", "QueueFlow"]
    with pytest.raises(SystemExit):
        dbtime.parse_args(["--systems", "oban"])
