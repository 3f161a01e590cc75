"""Small helpers the API tests share: credentials, error-body checks, job and dead-letter setup."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from aiohttp.test_utils import TestClient

from tests.support.api import database_of

DEV = {"Authorization": "Bearer dev"}

# HMAC secrets shorter than the hash (up to 64 bytes for HS512) make PyJWT warn (and warnings are errors here).
JWT_SECRET = "s3cret-" * 10

# Strict credentials: two tenants, a read-only key for acme, JWTs and a worker token.
STRICT = {
    "dev": False,
    "worker_token": "wtok",
    "api_keys": "key1:acme,key2:globex,ro1:acme:ro",
    "jwt_secret": JWT_SECRET,
}
ACME = {"Authorization": "Bearer key1"}
GLOBEX = {"Authorization": "Bearer key2"}
ACME_RO = {"Authorization": "Bearer ro1"}
WORKER = {"Authorization": "Bearer wtok"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_jwt(
    sub: str | None = "acme",
    *,
    secret: str = JWT_SECRET,
    algorithm: str = "HS256",
    exp_in: float | None = 3600,
    **claims: Any,
) -> str:
    body: dict[str, Any] = dict(claims)
    if sub is not None:
        body["sub"] = sub
    if exp_in is not None:
        body["exp"] = int(time.time() + exp_in)
    return jwt.encode(body, secret, algorithm=algorithm)


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def expect_error(resp: Any, status: int, prefix: str | None = None) -> str:
    """Assert `resp` is the contract's error body with `status`; return the message."""
    text = await resp.text()
    assert resp.status == status, f"expected {status}, got {resp.status}: {text}"
    assert resp.content_type == "application/json", text
    body = await resp.json()
    assert set(body) == {"error", "timestamp"}, body
    assert isinstance(body["error"], str) and body["error"]
    assert parse_time(body["timestamp"]).tzinfo is not None
    if prefix is not None:
        assert body["error"].startswith(prefix), body["error"]
    return str(body["error"])


async def create_job(client: TestClient, headers: dict[str, str] = DEV, **body: Any) -> str:
    body.setdefault("task_name", "noop")
    resp = await client.post("/api/v1/jobs", json=body, headers=headers)
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["job_id"])


async def create_batch(
    client: TestClient, items: list[dict[str, Any]], headers: dict[str, str] = DEV
) -> list[str]:
    resp = await client.post("/api/v1/jobs/batch", json={"jobs": items}, headers=headers)
    assert resp.status == 201, await resp.text()
    return list((await resp.json())["job_ids"])


async def get_job(client: TestClient, job_id: str, headers: dict[str, str] = DEV) -> dict[str, Any]:
    resp = await client.get(f"/api/v1/jobs/{job_id}", headers=headers)
    assert resp.status == 200, await resp.text()
    return dict(await resp.json())


async def list_json(
    client: TestClient, path: str, headers: dict[str, str] = DEV, **params: Any
) -> dict[str, Any]:
    query = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items()}
    resp = await client.get(path, params=query, headers=headers)
    assert resp.status == 200, await resp.text()
    return dict(await resp.json())


async def lease(
    client: TestClient, queue: str, headers: dict[str, str] = DEV, **body: Any
) -> list[dict[str, Any]]:
    resp = await client.post(f"/api/v1/queues/{queue}/lease", json=body, headers=headers)
    assert resp.status == 200, await resp.text()
    return list((await resp.json())["jobs"])


async def lease_one(client: TestClient, queue: str, job_id: str, headers: dict[str, str] = DEV) -> str:
    """Lease `queue` (holding only `job_id`) and return the job's lease token."""
    leased = await lease(client, queue, headers, max_jobs=1)
    assert [item["job"]["id"] for item in leased] == [job_id]
    return str(leased[0]["lease_token"])


async def fail_job(
    client: TestClient,
    job_id: str,
    token: str,
    *,
    retryable: bool = False,
    error: str = "boom",
    headers: dict[str, str] = DEV,
) -> None:
    resp = await client.post(
        f"/api/v1/jobs/{job_id}/fail",
        json={"lease_token": token, "error": error, "retryable": retryable},
        headers=headers,
    )
    assert resp.status == 204, await resp.text()


async def complete_job(
    client: TestClient,
    job_id: str,
    token: str,
    result: dict[str, Any] | None = None,
    headers: dict[str, str] = DEV,
) -> None:
    resp = await client.post(
        f"/api/v1/jobs/{job_id}/complete",
        json={"lease_token": token, "result": result or {}},
        headers=headers,
    )
    assert resp.status == 204, await resp.text()


async def make_dead_letter(
    client: TestClient,
    queue: str,
    *,
    task_name: str = "boom",
    payload: dict[str, Any] | None = None,
    headers: dict[str, str] = DEV,
    worker: dict[str, str] = DEV,
    **extra: Any,
) -> tuple[str, int]:
    """A job on `queue` (a queue no in-process worker drains) failed non-retryably through the
    worker protocol. Returns (job id, dead-letter id)."""
    job_id = await create_job(
        client,
        headers,
        task_name=task_name,
        payload=payload or {},
        config={"queue": queue, **extra.pop("config", {})},
        **extra,
    )
    token = await lease_one(client, queue, job_id, worker)
    await fail_job(client, job_id, token, headers=worker)
    dl_id = await database_of(client).pool.fetchval(
        "SELECT id FROM queueflow.dead_letters WHERE job_id = $1::uuid", job_id
    )
    assert dl_id is not None
    return job_id, int(dl_id)


async def count(client: TestClient, table: str, where: str = "TRUE", *args: Any) -> int:
    return int(
        await database_of(client).pool.fetchval(
            f"SELECT count(*) FROM queueflow.{table} WHERE {where}", *args
        )
    )


BASE = datetime(2030, 1, 1, tzinfo=UTC)


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


async def set_created_at(client: TestClient, table: str, id_type: str, ids: list[Any]) -> list[datetime]:
    """Give rows of `table` distinct, known creation times: BASE + i minutes, in list order."""
    stamps = [BASE + timedelta(minutes=i) for i in range(len(ids))]
    await database_of(client).pool.execute(
        f"UPDATE queueflow.{table} t SET created_at = u.at FROM unnest($1::{id_type}[], $2::timestamptz[])"
        " AS u(id, at) WHERE t.id = u.id",
        ids,
        stamps,
    )
    return stamps
