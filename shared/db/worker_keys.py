"""Worker key repository: mint, list and revoke a tenant's keys, resolve a presented token's
digest, and tell which jobs a key's tenant owns."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from shared.db import audit
from shared.db.pool import Executor, record
from shared.db.queries import Q
from shared.domain.errors import NotFound
from shared.domain.worker_keys import NewWorkerKey, WorkerGrant, WorkerKey


def to_worker_key(r: asyncpg.Record) -> WorkerKey:
    return record(WorkerKey, r)


async def create(db: Executor, tenant: str, key: NewWorkerKey, digest: bytes) -> WorkerKey:
    async with audit.change(db) as conn:
        row = await conn.fetchrow(
            Q.insert_worker_key, uuid.uuid4(), tenant, key.name, key.queues, digest, key.expires_at
        )
        assert row is not None
        audit.made(row["id"])
    return to_worker_key(row)


async def list_keys(db: Executor, tenant: str) -> list[WorkerKey]:
    """The tenant's keys, oldest first."""
    return [to_worker_key(r) for r in await db.fetch(Q.list_worker_keys, tenant)]


async def delete(db: Executor, tenant: str, key_id: uuid.UUID) -> None:
    """Revoke the tenant's key (every API process is notified on commit); NotFound for an unknown
    key, one already revoked, and another tenant's."""
    async with audit.change(db) as conn:
        if await conn.fetchrow(Q.delete_worker_key, key_id, tenant) is None:
            raise NotFound("worker key", key_id)


async def find(db: Executor, digest: bytes) -> WorkerGrant | None:
    """The key whose token has `digest`, expired or not; None when there is none."""
    row = await db.fetchrow(Q.find_worker_key, digest)
    if row is None:
        return None
    queues = row["queues"]
    return WorkerGrant(
        key_id=row["id"],
        tenant=row["tenant_id"],
        queues=None if queues is None else frozenset(queues),
        expires_at=row["expires_at"],
    )


async def owned_jobs(db: Executor, tenant: str, job_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of `job_ids` belong to `tenant`."""
    return {r["id"] for r in await db.fetch(Q.jobs_of_tenant, list(job_ids), tenant)}
