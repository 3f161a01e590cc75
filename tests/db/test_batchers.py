"""Group commit: concurrent single enqueues and completions share statements, yet every caller
gets its own answer, idempotency keys hold within a group, and tenants stay apart."""

import asyncio
import uuid

import pytest

from shared.db import jobs as jobs_db
from shared.db.batcher import GroupCommit
from shared.domain.errors import Conflict
from shared.domain.jobs import NewJob
from tests.protocol.helpers import create_job, lease_one
from tests.support.api import database_of


async def test_concurrent_single_enqueues_each_get_their_own_job(api, db):
    client = await api(dev=False, worker_token="w", api_keys="ka:acme,kb:globex")
    keys = {"ka": {"Authorization": "Bearer ka"}, "kb": {"Authorization": "Bearer kb"}}

    async def create(i: int, key: str, idem: str | None = None) -> str:
        headers = dict(keys[key])
        if idem:
            headers["Idempotency-Key"] = idem
        resp = await client.post(
            "/api/v1/jobs", json={"task_name": "t", "payload": {"i": i}}, headers=headers
        )
        assert resp.status == 201
        return (await resp.json())["job_id"]

    ids = await asyncio.gather(
        *(create(i, "ka") for i in range(40)),
        *(create(100 + i, "kb") for i in range(20)),
        *(create(200, "ka", "same-key") for _ in range(5)),
        *(create(300, "kb", "same-key") for _ in range(5)),
    )
    plain, dup_a, dup_b = ids[:60], ids[60:65], ids[65:]
    assert len(set(plain)) == 60
    assert len(set(dup_a)) == 1 and len(set(dup_b)) == 1 and dup_a[0] != dup_b[0]
    rows = await db.fetch("SELECT tenant_id, count(*) AS n FROM queueflow.jobs GROUP BY tenant_id ORDER BY 1")
    assert [(r["tenant_id"], r["n"]) for r in rows] == [("acme", 41), ("globex", 21)]
    for job_id, i in zip(plain[:40], range(40), strict=True):
        job = await jobs_db.get_job(database_of(client).pool, "acme", uuid.UUID(job_id))
        assert job is not None and job.payload == {"i": i}


async def test_a_failing_job_in_a_group_fails_alone(api):
    client = await api()
    db = database_of(client)
    good = NewJob(task_name="t", queue="q")
    bad = NewJob(task_name="t", queue="q", payload={"s": "\x00"})
    results = await asyncio.gather(
        db.inserter.insert("tenant1", good),
        db.inserter.insert("tenant1", bad),
        db.inserter.insert("tenant1", good),
        return_exceptions=True,
    )
    assert isinstance(results[0], uuid.UUID) and isinstance(results[2], uuid.UUID)
    assert isinstance(results[1], Exception)


class _Slow(GroupCommit[int, int]):
    """Writes take as long as the test says; no database involved."""

    def __init__(self) -> None:
        super().__init__(pool=None)  # type: ignore[arg-type]  # _write_many never touches it
        self.release = asyncio.Event()

    async def _write_many(self, items: list[int]) -> list[int | BaseException]:
        await self.release.wait()
        return [i * 10 for i in items]


async def test_close_lets_a_write_in_flight_finish():
    batcher = _Slow()
    write = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(batcher.close(timeout=5))
    await asyncio.sleep(0.05)
    assert not closing.done()
    batcher.release.set()
    assert await write == 10
    await closing


async def test_close_answers_every_caller_it_could_not_write_for():
    batcher = _Slow()
    writes = [asyncio.ensure_future(batcher.submit(i)) for i in range(3)]
    await asyncio.sleep(0)
    await batcher.close(timeout=0.05)
    for write in writes:
        with pytest.raises(ConnectionError, match="shut down before the write was confirmed"):
            await write


async def test_a_stale_holder_in_the_same_group_as_the_holder_is_told_its_lease_is_lost(api, db):
    """Two completions of one job in one statement, by the holder and by a token that lost it: the
    holder's wins and the other is a conflict, not a replay."""
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    pool = database_of(client).pool
    jid = uuid.UUID(job_id)

    answers = await jobs_db.complete_many(
        pool, [(jid, uuid.uuid4(), {"who": "stale"}), (jid, uuid.UUID(token), {"who": "holder"})]
    )

    assert answers[1] is None
    assert isinstance(answers[0], Conflict)
    assert (await db.fetchval("SELECT result FROM queueflow.jobs WHERE id = $1", jid)) == '{"who": "holder"}'
