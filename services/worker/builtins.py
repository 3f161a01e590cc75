"""The built-in tasks every worker registers: echo, log, sleep, fail."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from services.worker.registry import JobContext, PermanentError, Registry

log = structlog.get_logger("queueflow.task")


async def echo(ctx: JobContext) -> dict[str, Any]:
    """Returns the payload plus "echoed": true. A workflow step's `_context` is left out: echoing
    it back into the context would double the context at every step of a chain."""
    return {**{k: v for k, v in ctx.payload.items() if k != "_context"}, "echoed": True}


async def log_task(ctx: JobContext) -> dict[str, Any]:
    """Logs the payload's `message` (never the whole payload) and returns {"logged": true}."""
    log.info("task_logged", job_id=ctx.job.id, message=str(ctx.payload.get("message", ""))[:1000])
    return {"logged": True}


async def sleep(ctx: JobContext) -> dict[str, Any]:
    """Sleeps `duration` seconds (also read as `seconds` or `secs`); cancellable."""
    raw = next((ctx.payload[k] for k in ("duration", "seconds", "secs") if k in ctx.payload), 1)
    try:
        secs = max(0.0, float(raw))
    except (TypeError, ValueError):
        raise PermanentError(f"sleep: duration must be a number, not {raw!r}") from None
    await asyncio.sleep(secs)
    return {"slept": secs}


async def fail(ctx: JobContext) -> dict[str, Any]:
    """Always fails; `permanent: true` makes the failure non-retryable."""
    message = str(ctx.payload.get("message") or ctx.payload.get("error") or "the fail task failed, as asked")
    if ctx.payload.get("permanent") is True:
        raise PermanentError(message)
    raise RuntimeError(message)


def register_builtins(registry: Registry) -> None:
    registry.register("echo", echo)
    registry.register("log", log_task)
    registry.register("sleep", sleep)
    registry.register("fail", fail)
