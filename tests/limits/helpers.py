"""Shared steps of the flow-control tests: a strict app (two tenants, a worker token), enqueue with
limits, lease, complete; and a claim with what it did to a table, for the tests of its plans."""

from __future__ import annotations

import uuid
from typing import Any

from shared.db import jobs as jobs_db
from shared.domain.jobs import Lease

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
