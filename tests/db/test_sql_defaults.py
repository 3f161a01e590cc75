"""Job-config defaults and bounds live in shared/domain/jobs.py (JobConfig); SQL repeats some of
them (the enqueue functions, the retry delay, the retry decision). These tests read every one of
those numbers out of the migrated schema and the named queries and check it against the domain."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from shared.config import Settings
from shared.db import jobs as jobs_db
from shared.db.queries import Q
from shared.domain.jobs import JobConfig

DEFAULTS: dict[str, Any] = msgspec.to_builtins(JobConfig())
# `COALESCE((config->>'field')::type, fallback)` (the column perhaps qualified, `j.config`) and `COALESCE(config->>'field', 'fallback')`
FALLBACK = re.compile(r"COALESCE\(\(?(?:\w+\.)?config->>'(\w+)'\)?(?:::[a-z ]+?)?,\s*'?([\w.]+)'?\)")


def _bounds() -> dict[str, tuple[float, float]]:
    out = {}
    for field in msgspec.structs.fields(JobConfig):
        schema = msgspec.json.schema(field.type)
        if "minimum" in schema:
            out[field.name] = (schema["minimum"], schema["maximum"])
    return out


def _same(value: str, default: Any) -> bool:
    return value == str(default) if isinstance(default, str) else float(value) == float(default)


async def test_resolve_job_config_of_nothing_is_the_domain_default(db):
    stored = msgspec.json.decode(await db.fetchval("SELECT queueflow.resolve_job_config('{}'::jsonb)::text"))
    assert stored == DEFAULTS


@pytest.mark.parametrize(("field", "bounds"), sorted(_bounds().items()))
async def test_the_sql_config_bounds_are_the_domain_bounds(db, field, bounds):
    low, high = bounds
    resolve = "SELECT queueflow.resolve_job_config(jsonb_build_object($1::text, $2::numeric))::text"
    for inside in (low, high):
        stored = msgspec.json.decode(await db.fetchval(resolve, field, inside))
        assert float(stored[field]) == float(inside)
    step = 1 if isinstance(low, int) else 0.001
    for outside in (low - step, high + step):
        with pytest.raises(Exception, match=field):
            await db.fetchval(resolve, field, outside)


async def test_every_config_fallback_in_the_schema_and_queries_is_the_domain_default(db):
    functions = [
        r["prosrc"]
        for r in await db.fetch(
            "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'queueflow'"
        )
    ]
    found = [m.groups() for text in [*functions, *Q.values()] for m in FALLBACK.finditer(text)]
    assert {name for name, _ in found} >= {
        "max_retries",
        "timeout_secs",
        "retry_delay_secs",
        "retry_max_delay_secs",
        "jitter_factor",
        "retry_backoff",
    }
    wrong = [(name, value) for name, value in found if not _same(value, DEFAULTS[name])]
    assert wrong == []


async def test_the_sql_enqueue_default_queue_is_the_servers_default_queue(db):
    job_id = await db.fetchval("SELECT queueflow.enqueue('acme', 'echo')")
    assert (
        await db.fetchval("SELECT queue_name FROM queueflow.jobs WHERE id = $1", job_id)
        == Settings().default_queue
    )


@pytest.mark.parametrize("config", ["{}", '{"limits": ["k"]}'], ids=["plain claim", "limited claim"])
async def test_a_config_stored_without_its_timeout_leases_for_the_default_timeout(db, config):
    """A stored config may leave fields out (ADR 0016): both claims must read a missing
    timeout_secs as the default, not as no timeout (a lease of lease_secs alone, which a longer
    in-process handler outlives)."""
    await db.execute(
        "INSERT INTO queueflow.jobs (id, queue_name, task_name, config, tenant_id) "
        "VALUES (gen_random_uuid(), 'sparse', 'echo', $1::text::jsonb, 't')",
        config,
    )
    [lease] = await jobs_db.claim(db, "sparse", 10, lease_secs=1, timeout_grace=5)
    assert lease.job.config.timeout_secs == DEFAULTS["timeout_secs"]
    left = await db.fetchval(
        "SELECT EXTRACT(EPOCH FROM locked_until - now())::float8 FROM queueflow.jobs WHERE id = $1",
        lease.job.id,
    )
    assert DEFAULTS["timeout_secs"] < left <= DEFAULTS["timeout_secs"] + 5
