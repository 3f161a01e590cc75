"""A push receiver on aiohttp: QueueFlow POSTs each job of a bound queue here.

    QUEUEFLOW_PUSH_SECRET=whsec_... python examples/push_aiohttp.py    # listens on :8080

Register ``http://<host>:8080/queueflow`` as a push endpoint (``POST /api/v1/push-endpoints``)
and keep the ``secret`` it answers with. The answer decides the job's outcome: a 2xx JSON body
completes it with that body as its result, a 5xx (or 408, 409, 425, 429) retries it, any other
4xx fails it for good. A delivery that fails verification gets a 503 with a ``Retry-After``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from unofficial_queueflow_client import InvalidPushDelivery, Job, PushVerifier

Task = Callable[[Job], Awaitable[dict[str, Any]]]


async def send_welcome(job: Job) -> dict[str, Any]:
    return {"sent_to": job.payload["to"]}


TASKS: dict[str, Task] = {"send-welcome": send_welcome}


def make_app(secret: str) -> web.Application:
    verifier = PushVerifier(secret)  # a malformed secret fails here, at start-up

    async def receive(request: web.Request) -> web.Response:
        body = await request.read()  # the raw bytes: the signature covers them exactly
        try:
            delivery = verifier.verify(request.headers, body)
        except InvalidPushDelivery as err:
            # 503, not 401: a wrong or undeployed secret must not dead-letter real jobs (docs/push.md).
            return web.json_response({"error": err.reason}, status=503, headers={"Retry-After": "60"})
        task = TASKS.get(delivery.job.task_name)
        if task is None:
            return web.json_response({"error": f"no task {delivery.job.task_name}"}, status=422)
        result = await task(delivery.job)  # an exception becomes a 500: QueueFlow retries the job
        return web.json_response(result)

    app = web.Application()
    app.router.add_post("/queueflow", receive)
    return app


if __name__ == "__main__":
    web.run_app(make_app(os.environ["QUEUEFLOW_PUSH_SECRET"]), port=8080)
