"""Shared steps of the flow-control tests: a strict app (two tenants, a worker token), enqueue with
limits, lease, complete; and a claim with what it did to a table, for the tests of its plans."""

from __future__ import annotations

import uuid
from typing import Any

from shared.db import jobs as jobs_db
from shared.db.pool import init_connection
from shared.domain.jobs import JobConfig, Lease, NewJob

TENANTS = "ka:acme,kb:globex,kr:acme:ro"
A = {"Authorization": "Bearer ka"}
B = {"Authorization": "Bearer kb"}
READ_ONLY = {"Authorization": "Bearer kr"}
W = {"Authorization": "Bearer w"}


async def strict(api: Any, **kw: Any) -> Any:
    return await api(dev=False, worker_token="w", api_keys=TENANTS, **kw)


async def enqueue(client: Any, n: int, limits: list[str] | None, queue: str = "q", headers=A, **config: Any):
    conf: dict[str, Any] = {"queue": queue, **config}
    if limits is not None:
        conf["limits"] = limits
    ids: list[str] = []
    for start in range(0, n, 1000):
        jobs = [
            {"task_name": "t", "payload": {"i": i}, "config": conf}
            for i in range(start, min(n, start + 1000))
        ]
        resp = await client.post("/api/v1/jobs/batch", json={"jobs": jobs}, headers=headers)
        assert resp.status == 201, await resp.text()
        ids += (await resp.json())["job_ids"]
    return ids


async def lease(client: Any, queue: str = "q", max_jobs: int = 10) -> list[dict[str, Any]]:
    resp = await client.post(f"/api/v1/queues/{queue}/lease", json={"max_jobs": max_jobs}, headers=W)
    assert resp.status == 200, await resp.text()
    return (await resp.json())["jobs"]


async def complete(client: Any, job: dict[str, Any]) -> None:
    resp = await client.post(
        f"/api/v1/jobs/{job['job']['id']}/complete",
        json={"lease_token": job["lease_token"], "result": {}},
        headers=W,
    )
    assert resp.status in (200, 204), await resp.text()


async def put_limit(client: Any, key: str, body: dict[str, Any], headers=A) -> dict[str, Any]:
    resp = await client.put(f"/api/v1/limits/{key}", json=body, headers=headers)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def limited_backlog(db: Any, concurrency: int, keys: int, jobs: int) -> None:
    """On a test's own connection: a policy `c:*` of `concurrency`, and `jobs` jobs of queue `q`
    with one key each, c:0 to c:<keys - 1> in turn, written in one batch."""
    await init_connection(db)  # jsonb as Python objects, like the server's pool
    await db.execute(
        "INSERT INTO queueflow.limit_policies (tenant_key, key, concurrency) VALUES ('', 'c:*', $1)",
        concurrency,
    )
    batch = [
        NewJob(task_name="t", queue="q", config=JobConfig(limits=(f"c:{n % keys}",))) for n in range(jobs)
    ]
    await jobs_db.insert_jobs(db, None, batch)


async def other_keys_releases(db: Any, n: int) -> None:
    """`n` waiting releases of keys no job of the test names (z:1 to z:<n>)."""
    await db.execute(
        "INSERT INTO queueflow.limit_releases (tenant_key, key) SELECT '', 'z:' || g FROM generate_series(1, $1::int) g",
        n,
    )


async def claim_with_scans(
    db: Any, table: str, max_jobs: int, rotation: int, lease_secs: int = 60
) -> tuple[list[Lease], dict[str, int]]:
    """One claim of queue `q` in a transaction of its own, and what it did to `queueflow.<table>`:
    its sequential scans, index scans and the rows those fetched (pg_stat_xact_user_tables, read
    before and after: PostgreSQL 15 also shows there what the session's earlier transactions did,
    until it reports them)."""
    stats = (
        "SELECT seq_scan, idx_scan, idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relid = $1::regclass"
    )
    async with db.transaction():
        before = await db.fetchrow(stats, f"queueflow.{table}")
        leases = await jobs_db.claim(db, "q", max_jobs, lease_secs, rotation=rotation, key=uuid.uuid4())
        after = await db.fetchrow(stats, f"queueflow.{table}")
    return leases, {name: after[name] - before[name] for name in ("seq_scan", "idx_scan", "idx_tup_fetch")}
