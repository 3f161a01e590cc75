"""The job listing's id search (`id_contains`): a whole id is a primary-key lookup, a piece is
searched along the tenant's index, more digits than an id has read nothing (the statistics of
the searching transaction say which index each search used)."""

import uuid

import pytest

from shared.db.jobs import list_jobs
from shared.db.pool import init_connection
from shared.domain.paging import ListQuery, id_fragment

INDEXES = ("jobs_pkey", "jobs_tenant_created_idx")


@pytest.fixture
async def job_ids(db) -> list[str]:
    await init_connection(db)  # jsonb as Python objects, like the server's pool
    rows = await db.fetch("""
        INSERT INTO queueflow.jobs (id, queue_name, task_name, config, tenant_id)
        SELECT gen_random_uuid(), 'q', 'echo', '{}'::jsonb, CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END
        FROM generate_series(1, 2000) AS i
        RETURNING id, tenant_id""")
    await db.execute("ANALYZE queueflow.jobs")
    return [str(r["id"]) for r in rows if r["tenant_id"] == "a"]


async def _search(db, tenant: str, fragment: str) -> tuple[list[str], dict[str, int]]:
    """The ids found, and how many scans of each index the search made (the session's counts not
    yet reported, after less before)."""

    async def counts() -> dict[str, int]:
        sql = "SELECT pg_stat_get_xact_numscans($1::regclass)"
        return {name: await db.fetchval(sql, f"queueflow.{name}") for name in INDEXES}

    async with db.transaction():
        before = await counts()
        page = await list_jobs(db, tenant, ListQuery(id_digits=id_fragment(fragment)))
        after = await counts()
    return [str(j.id) for j in page.items], {name: after[name] - before[name] for name in INDEXES}


async def test_a_whole_id_is_looked_up_by_the_primary_key_within_the_tenant(db, job_ids):
    target = job_ids[7]
    for written in (target, target.upper(), target.replace("-", "")):
        found, scans = await _search(db, "a", written)
        assert found == [target]
        assert scans == {"jobs_pkey": 1, "jobs_tenant_created_idx": 0}
    assert (await _search(db, "b", target))[0] == []


async def test_a_piece_of_an_id_walks_the_tenants_index(db, job_ids):
    target = job_ids[7]
    found, scans = await _search(db, "a", target[-12:])
    assert found == [target]
    assert scans == {"jobs_pkey": 0, "jobs_tenant_created_idx": 1}


async def test_more_digits_than_an_id_has_read_no_index(db, job_ids):
    found, scans = await _search(db, "a", job_ids[0].replace("-", "") + "0")
    assert found == []
    assert scans == {"jobs_pkey": 0, "jobs_tenant_created_idx": 0}


def test_an_id_fragment_is_its_lowercase_hex_digits():
    assert id_fragment("01A2-b3") == "01a2b3"
    assert id_fragment("--") is None
    assert id_fragment(str(uuid.UUID(int=1))) == "0" * 31 + "1"
