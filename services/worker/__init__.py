"""In-process Python handlers: the runtime that leases and runs them, the registry, the built-ins.

User modules import what they need from here:

    from services.worker import JobContext, PermanentError, task

    @task("resize-image", concurrency=4, timeout_secs=60)
    async def resize(ctx: JobContext) -> dict:
        ...

and are loaded with `queueflow serve --mode worker --handlers mypkg.tasks` (docs/handlers.md).
"""

from services.worker.registry import JobContext, PermanentError, TaskSpec, task
from shared.domain.jobs import Job, JobConfig, JobStatus

__all__ = ["Job", "JobConfig", "JobContext", "JobStatus", "PermanentError", "TaskSpec", "task"]
