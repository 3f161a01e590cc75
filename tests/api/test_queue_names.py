"""Queue names are 1 to 128 bytes with no whitespace and no control characters, wherever a queue
is named: a job's config, batch items, workflow steps, cron schedules, lease, pause and resume, the
SQL enqueue function and the server's own --default-queue/--queues. A bad one is a 400 with the
error body, and nothing is written."""

from __future__ import annotations

import asyncpg
import pytest

from services.cli import build_parser
from shared.config import ConfigError, settings_from
from tests.api.helpers import DEV, count, expect_error

BAD = {
    "empty": "",
    "a space": "my queue",
    "a tab": "q\tq",
    "a newline": "q\nq",
    "a control character": "q\x07q",
    "a non-breaking space": "q\u00a0q",
    "129 bytes": "q" * 129,
    "129 bytes of UTF-8 in 65 characters": "é" * 64 + "q",
}
GOOD = ["q", "emails.high-priority", "q" * 128, "é" * 64, "队列"]
MESSAGE = "validation error: queue name must be 1 to 128 bytes with no whitespace or control characters"


@pytest.mark.parametrize("queue", list(BAD.values()), ids=list(BAD))
async def test_a_bad_queue_name_is_400_everywhere_and_writes_nothing(api, queue):
    client = await api()
    job = {"task_name": "t", "config": {"queue": queue}}
    await expect_error(await client.post("/api/v1/jobs", json=job, headers=DEV), 400, MESSAGE)
    batch = {"jobs": [{"task_name": "t"}, job]}
    await expect_error(
        await client.post("/api/v1/jobs/batch", json=batch, headers=DEV),
        400,
        "validation error: jobs[1]: queue name",
    )
    workflow = {"name": "w", "steps": [{"name": "a", "task_name": "t", "queue": queue}]}
    await expect_error(
        await client.post("/api/v1/workflows", json=workflow, headers=DEV),
        400,
        "invalid workflow: step 'a': queue name",
    )
    cron = {"name": "c", "cron_expr": "* * * * *", "task_name": "t", "queue": queue}
    await expect_error(await client.post("/api/v1/cron", json=cron, headers=DEV), 400, MESSAGE)
    assert (
        await count(client, "jobs")
        == await count(client, "workflows")
        == await count(client, "cron_schedules")
        == 0
    )


@pytest.mark.parametrize("queue", [q for q in BAD.values() if q and "\n" not in q and "\t" not in q], ids=str)
async def test_a_bad_queue_name_in_a_path_is_400(api, queue):
    client = await api()
    path = queue.replace(" ", "%20").replace("\x07", "%07").replace("\u00a0", "%C2%A0")
    for route in (f"/api/v1/queues/{path}/pause", f"/api/v1/queues/{path}/resume"):
        await expect_error(await client.post(route, headers=DEV), 400, MESSAGE)
    await expect_error(await client.post(f"/api/v1/queues/{path}/lease", json={}, headers=DEV), 400, MESSAGE)


@pytest.mark.parametrize("queue", GOOD)
async def test_a_good_queue_name_is_accepted(api, queue):
    client = await api()
    resp = await client.post("/api/v1/jobs", json={"task_name": "t", "config": {"queue": queue}}, headers=DEV)
    assert resp.status == 201, await resp.text()


async def test_the_sql_enqueue_function_refuses_a_bad_queue_name(db):
    with pytest.raises(asyncpg.InvalidParameterValueError, match="queue name must be 1 to 128 bytes"):
        await db.fetchval("SELECT queueflow.enqueue('acme', 't', '{}', 'my queue')")
    assert await db.fetchval("SELECT count(*) FROM queueflow.jobs") == 0


@pytest.mark.parametrize("flag", ["--default-queue", "--queues"])
def test_the_server_refuses_to_start_with_a_bad_queue_name(flag):
    args = build_parser().parse_args(["serve", "--database-url", "postgresql://x/y", flag, "a b"])
    with pytest.raises(ConfigError, match="queue name"):
        settings_from(args, {})
