import time, uuid
from shared.db.queries import Q
from tests.limits.helpers import A, W, enqueue, lease, put_limit, strict
from tests.support.api import database_of

async def test_dbg(api):
    client = await strict(api)
    db = database_of(client)
    await put_limit(client, "c:*", {"concurrency": 5})
    for q, lim in (("q", True), ("u", False)):
        for start in range(0, 20000, 1000):
            jobs = [{"task_name": "t", "config": {"queue": q, **({"limits": [f"c:{i % 1000}"]} if lim else {})}} for i in range(start, start + 1000)]
            r = await client.post("/api/v1/jobs/batch", json={"jobs": jobs}, headers=A)
            assert r.status == 201
    await db.pool.execute("VACUUM ANALYZE queueflow.jobs")
    async with db.pool.acquire() as conn:
        for q in ("u", "q", "u", "q"):
            for n in (50, 500):
                t = time.perf_counter()
                rows = await conn.fetch(Q.claim_jobs, q, n, 60, None, 0, uuid.uuid4())
                print(q, n, len(rows), "ms", round(1000 * (time.perf_counter() - t), 1))
    assert 0
