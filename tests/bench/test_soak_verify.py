"""bench.soak's checks on canned evidence: what counts as lost, which duplicate executions a kill
explains, the latency windows and the cron accounting. No PostgreSQL, no processes."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

from bench.soak import execlog, verify
from bench.soak.execlog import Execution

T0 = 1_000_000.0


def job(job_id: str, status: str = "completed", created: float = T0 + 1, **extra: Any) -> dict[str, Any]:
    row = {
        "id": job_id,
        "status": status,
        "queue_name": "soak-local",
        "task_name": "soak-work",
        "idempotency_key": None,
        "workflow_id": None,
        "delivery_count": 1,
        "created": created,
        "started": None,
        "completed": None,
        "live_lease": False,
        "cron_id": None,
        "cron_due_at": None,
    }
    row.update(extra)
    return row


def state(jobs: list[dict[str, Any]], acked: dict[str, str], kills: list[dict[str, Any]] = ()) -> Any:
    return SimpleNamespace(
        t0=T0,
        load_ended=T0 + 600,
        jobs={
            key: {"id": job_id, "kind": "single", "queue": "q", "sent": T0} for key, job_id in acked.items()
        },
        workflows=[],
        crons={},
        kills=list(kills),
        samples=[],
        counts={},
        drain={"secs": 0.0, "jobs_left": 0, "workflows_left": 0},
        remote={},
        db={"jobs": jobs, "workflows": [], "dead_letters": 0},
    )


OPTS = SimpleNamespace(minutes=10, kill_secs=120, sample_secs=12, seed=1, out_dir="x")


def test_an_acknowledged_job_missing_from_the_table_is_lost() -> None:
    r = verify.analyse(
        state([job("a")], {"s-0": "a", "s-1": "b"}), [Execution("a", 1, "worker", T0 + 2, 1)], OPTS
    )
    assert r["lost"]["count"] == 1
    assert r["lost"]["missing_acknowledged"] == ["s-1"]


def test_a_running_job_is_lost_only_when_its_lease_is_dead() -> None:
    jobs = [
        job("live", "running", live_lease=True),
        job("dead", "running", live_lease=False),
        job("p", "pending"),
    ]
    r = verify.analyse(state(jobs, {}), [], OPTS)
    assert r["lost"]["not_terminal"] == ["dead", "p"]
    assert r["lost"]["in_flight_with_live_lease"] == ["live"]


def test_a_second_execution_is_explained_only_by_a_kill_of_the_first_holder_after_it_started() -> None:
    kill = {"role": "worker", "pid": 7, "at": T0 + 10, "t": 10.0, "new_pid": 8, "ready_after_secs": 1.0}
    runs = [
        Execution("x", 7, "worker", T0 + 5, 1),  # started before pid 7 was killed: explained
        Execution("x", 8, "worker", T0 + 45, 2),
        Execution("y", 9, "remote", T0 + 5, 1),  # pid 9 was never killed: unexplained
        Execution("y", 8, "worker", T0 + 50, 2),
    ]
    r = verify.analyse(state([job("x"), job("y")], {}, [kill]), runs, OPTS)
    assert r["duplicates"]["count"] == 2
    assert r["duplicates"]["explained_by_kill"] == 1
    assert [d["job_id"] for d in r["duplicates"]["unexplained"]] == ["y"]
    assert r["duplicates"]["per_kill"] == {"worker pid 7 at t=10.0s": 1}


def test_a_completed_job_no_handler_started_is_reported() -> None:
    r = verify.analyse(state([job("a"), job("b")], {}), [Execution("a", 1, "worker", T0 + 2, 1)], OPTS)
    assert r["completed_without_execution"] == ["b"]


def test_latency_is_first_start_minus_created_per_five_minute_window_of_creation() -> None:
    jobs = [
        job("a", created=T0 + 10, delivery_count=2),
        job("b", created=T0 + 310),
        job("c", created=T0 + 20),
    ]
    runs = [
        Execution("a", 1, "worker", T0 + 10.5, 1),
        Execution("a", 2, "worker", T0 + 60, 2),  # a redelivery: the first start counts
        Execution("b", 1, "remote", T0 + 310.02, 1),
    ]
    windows = verify.analyse(state(jobs, {}), runs, OPTS)["latency_windows"]
    assert [(w["window"], w["jobs"], w["p50_ms"]) for w in windows] == [
        ("0-5 min", 1, 500.0),
        ("5-10 min", 1, 20.0),
    ]


def test_cron_counts_missed_and_duplicate_occurrences() -> None:
    s = state(
        [job(str(i), cron_id="c", cron_due_at=due) for i, due in enumerate(["t10", "t20", "t20"])],
        {},
    )
    s.crons = {"c": {"name": "every-10s", "expr": "*/10 * * * * *", "created": T0, "deleted": T0 + 40}}
    assert verify.analyse(s, [], OPTS)["cron"]["every-10s"] == {
        "expected_occurrences": 4,
        "fired": 3,
        "duplicate_occurrences": 1,
        "missed_occurrences": 2,
    }


def test_the_execution_log_round_trips_and_skips_a_torn_line(tmp_path, monkeypatch) -> None:
    path = tmp_path / "exec.log"
    monkeypatch.setenv(execlog.ENV, str(path))
    monkeypatch.setattr(execlog, "_fd", None)
    execlog.record("j1", "worker", 1)
    execlog.record("j2", "remote", 3)
    with open(path, "a") as f:
        f.write("j3 12")  # a line cut short
    os.close(execlog._fd)
    got = execlog.read(path)
    assert [(e.job_id, e.role, e.delivery) for e in got] == [("j1", "worker", 1), ("j2", "remote", 3)]
