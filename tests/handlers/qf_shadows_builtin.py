"""A --handlers module whose task would shadow the built-in `echo`: a start-up error."""

from services.worker import JobContext, task


@task("echo")
async def my_echo(ctx: JobContext) -> dict[str, object]:
    return {}
