"""Handlers the tests in tests/handlers load into real worker processes with
`--handlers tests.handlers.qf_handler_tasks` (the child runs from the repository root, so the
`tests` package is importable there).

Handlers that must show the test something they did write marker files whose paths come in the
payload; concurrency probes count, per task, how many of their handlers run at this moment in
this process and return what they saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from pathlib import Path
from typing import Any

from services.worker import JobContext, PermanentError, task

_running: dict[str, int] = {}
_peak: dict[str, int] = {}
_changes: dict[str, asyncio.Condition] = {}
_lock = threading.Lock()  # for the sync probe, whose handlers run on several threads


def _mark(ctx: JobContext, suffix: str, text: str = "") -> None:
    """Write `<payload.marker>.<suffix>` whole or not at all (the test polls for it)."""
    target = Path(f"{ctx.payload['marker']}.{suffix}")
    scratch = target.with_name(target.name + ".tmp")
    scratch.write_text(text)
    os.replace(scratch, target)


@task("t-double")
async def double(ctx: JobContext) -> dict[str, Any]:
    return {"doubled": ctx.payload["n"] * 2, "job_id": ctx.job.id}


@task("t-thread")
def which_thread(ctx: JobContext) -> dict[str, Any]:
    current = threading.current_thread()
    return {
        "thread": current.name,
        "is_main_thread": current is threading.main_thread(),
        "n": ctx.payload.get("n"),
    }


async def _probe(name: str, ctx: JobContext) -> dict[str, Any]:
    """Count the handlers of `name` running alongside this one: wait (at most `hold_secs`) for
    `partners` of them to run at once, so that a limit letting more through would show it."""
    changed = _changes.setdefault(name, asyncio.Condition())
    partners = int(ctx.payload.get("partners", 2))
    async with changed:
        _running[name] = _running.get(name, 0) + 1
        _peak[name] = max(_peak.get(name, 0), _running[name])
        changed.notify_all()
    try:
        async with changed:
            seen = _running[name]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    changed.wait_for(lambda: _running[name] >= partners),
                    float(ctx.payload.get("hold_secs", 0.3)),
                )
            seen = max(seen, _running[name])
        return {"most_at_once": seen, "peak_in_process": _peak[name]}
    finally:
        async with changed:
            _running[name] -= 1
            changed.notify_all()


@task("t-solo", concurrency=1)
async def solo(ctx: JobContext) -> dict[str, Any]:
    return await _probe("t-solo", ctx)


@task("t-pair", concurrency=2)
async def pair(ctx: JobContext) -> dict[str, Any]:
    return await _probe("t-pair", ctx)


@task("t-solo-sync", concurrency=1)
def solo_sync(ctx: JobContext) -> dict[str, Any]:
    with _lock:
        _running["t-solo-sync"] = _running.get("t-solo-sync", 0) + 1
        seen = _running["t-solo-sync"]
    try:
        ctx.wait_cancelled(float(ctx.payload.get("hold_secs", 0.2)))
        with _lock:
            return {"most_at_once": max(seen, _running["t-solo-sync"])}
    finally:
        with _lock:
            _running["t-solo-sync"] -= 1


@task("t-slow", timeout_secs=1)
async def slow(ctx: JobContext) -> dict[str, Any]:
    await asyncio.sleep(3600)
    return {}


@task("t-slow-sync", timeout_secs=1)
def slow_sync(ctx: JobContext) -> dict[str, Any]:
    told = ctx.wait_cancelled(60)
    _mark(ctx, "stopped", "told" if told and ctx.is_cancelled else "not told")
    return {}


@task("t-permanent")
async def permanent(ctx: JobContext) -> dict[str, Any]:
    raise PermanentError(f"cannot handle {ctx.payload.get('what', 'this')}")


@task("t-flaky")
async def flaky(ctx: JobContext) -> dict[str, Any]:
    raise RuntimeError("try again later")


@task("t-wait-cancel")
async def wait_for_cancel(ctx: JobContext) -> dict[str, Any]:
    _mark(ctx, "started")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        _mark(ctx, "cancelled", "event set" if ctx.cancelled.is_set() else "event not set")
        raise
    return {"finished": True}


@task("t-solo-cancel", concurrency=1)
async def solo_until_cancelled(ctx: JobContext) -> dict[str, Any]:
    return await wait_for_cancel(ctx)


@task("t-wait-cancel-sync")
def wait_for_cancel_sync(ctx: JobContext) -> dict[str, Any]:
    _mark(ctx, "started")
    while not ctx.is_cancelled:
        ctx.wait_cancelled(0.05)
    _mark(ctx, "cancelled", threading.current_thread().name)
    return {"finished": True}
