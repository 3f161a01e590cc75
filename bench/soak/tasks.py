"""The soak's in-process handler (`serve --mode worker --handlers bench.soak.tasks`).

`soak-work` records its start in the execution log (bench/soak/execlog.py) and then sleeps a few
tenths of a second (50 to 400 ms), so a SIGKILL of the worker finds handlers mid-run.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from bench.soak import execlog
from services.worker import JobContext, task


@task("soak-work")
async def soak_work(ctx: JobContext) -> dict[str, Any]:
    execlog.record(str(ctx.job.id), "worker", ctx.job.delivery_count)
    await asyncio.sleep(random.uniform(0.05, 0.4))
    return {"ok": True}
