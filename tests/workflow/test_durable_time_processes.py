"""Durable time across a SIGKILL (issue 15): sleeping and waiting steps live in PostgreSQL, so a
workflow process killed with SIGKILL loses nothing. Sleeps that fall due while no workflow process
runs fire once when one starts again; events sent meanwhile are delivered to their waits."""

from __future__ import annotations

import asyncio
import json

import asyncpg

from tests.support.waiting import eventually
from tests.workflow.helpers import create, post


async def test_sleeps_and_waits_survive_a_sigkill_of_the_workflow_process(api, database_url, service):
    client = await api()  # API only: timers and advancement run in the workflow processes
    workflow_proc = await service(database_url, mode="workflow")
    sleepers = await asyncio.gather(
        *(
            create(
                client,
                [{"name": "nap", "sleep_secs": 2}, {"name": "w", "wait_for_event": {"key": f"k:{i}"}}],
                name=f"s{i}",
            )
            for i in range(20)
        )
    )
    await workflow_proc.kill()  # SIGKILL: its timers were rows, not memory

    conn = await asyncpg.connect(database_url)
    try:
        armed = await conn.fetchval(
            "SELECT count(*) FROM queueflow.workflow_steps WHERE status = 'running'"
            " AND (wake_at IS NOT NULL OR event_key IS NOT NULL)"
        )
        assert armed == 40
        for i in range(20):  # events while no workflow process runs: delivered, applied later
            status, body = await post(client, "/api/v1/events", {"key": f"k:{i}", "payload": {"i": i}})
            assert status == 202 and body["delivered"] == 1, body

        async def all_due() -> bool:
            return bool(
                await conn.fetchval(
                    "SELECT bool_and(wake_at <= now()) FROM queueflow.workflow_steps WHERE name = 'nap'"
                )
            )

        await eventually(all_due, timeout=30, interval=0.2)  # every sleep fell due while nothing ran

        await service(database_url, mode="workflow")
        await service(database_url, mode="workflow")  # two now share the recovery

        async def finished() -> bool:
            return await conn.fetchval(
                "SELECT count(*) FROM queueflow.workflows WHERE status = 'completed'"
            ) == len(sleepers)

        await eventually(finished, timeout=60, interval=0.2)
        steps = await conn.fetch("SELECT status, count(*) AS n FROM queueflow.workflow_steps GROUP BY status")
        assert {r["status"]: r["n"] for r in steps} == {"completed": 40}
        contexts = await conn.fetch("SELECT name, context FROM queueflow.workflows ORDER BY name")
        for row in contexts:
            context = json.loads(row["context"])
            assert context["w"] == {"i": int(row["name"][1:])}
            assert context["nap"]["slept_until"].endswith("Z")
        assert await conn.fetchval("SELECT count(*) FROM queueflow.workflow_outbox") == 0
    finally:
        await conn.close()
