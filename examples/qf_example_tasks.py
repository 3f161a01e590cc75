"""Example QueueFlow handlers (docs/handlers.md walks through them).

Run them in a worker process:

    PYTHONPATH=examples queueflow serve --dev --handlers qf_example_tasks

then enqueue jobs for the tasks below with the REST API, an SDK, or queueflow.enqueue() in SQL.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from typing import Any

from services.worker import JobContext, PermanentError, task


@task("word-count")
def word_count(ctx: JobContext) -> dict[str, Any]:
    """A sync handler: it runs in a worker thread, so CPU-bound or blocking code does not stall
    the event loop. Long loops check `ctx.is_cancelled` and stop early when the job is cancelled."""
    text = ctx.payload.get("text")
    if not isinstance(text, str):
        raise PermanentError("payload.text must be a string")  # retrying would not help
    counts: dict[str, int] = {}
    for word in re.findall(r"[\w']+", text.lower()):
        if ctx.is_cancelled:
            return {}  # nothing is recorded for a cancelled job anyway
        counts[word] = counts.get(word, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: int(ctx.payload.get("top", 3))]
    return {"words": sum(counts.values()), "distinct": len(counts), "top": [w for w, _ in top]}


@task("fingerprint", concurrency=2, timeout_secs=30)
async def fingerprint(ctx: JobContext) -> dict[str, Any]:
    """An async handler limited to two at a time per worker process, with its own 30 s timeout
    (whatever the job's config says). Hashing a large blob is CPU work, so it goes to a thread."""
    blob = str(ctx.payload.get("data", "")).encode()
    rounds = int(ctx.payload.get("rounds", 1))
    if not 1 <= rounds <= 1000:
        raise PermanentError("payload.rounds must be between 1 and 1000")
    digest = await asyncio.to_thread(_stretch, blob, rounds)
    return {"sha256": digest, "rounds": rounds}


def _stretch(blob: bytes, rounds: int) -> str:
    for _ in range(rounds):
        blob = hashlib.sha256(blob).digest()
    return blob.hex()


@task("notify-customer", timeout_secs=10)
async def notify_customer(ctx: JobContext) -> dict[str, Any]:
    """Transient errors (any exception) are retried with the job's backoff; PermanentError
    dead-letters the job at once. A real handler would call an email or SMS provider here."""
    address = ctx.payload.get("email")
    if not isinstance(address, str) or "@" not in address:
        raise PermanentError(f"not an email address: {address!r}")
    await asyncio.sleep(0)  # stands in for the provider call; cancelled if the job is
    return {"sent_to": address, "attempt": ctx.job.retry_count + 1}
