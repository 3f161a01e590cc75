"""A --handlers module that defines no tasks: serve must refuse to start, naming it."""

from services.worker import JobContext


def not_a_task(ctx: JobContext) -> dict[str, object]:
    return {}
