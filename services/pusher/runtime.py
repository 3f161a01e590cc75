"""The pusher: per endpoint and bound queue, claim jobs through the claim path every lease takes and
POST each to the endpoint's URL, signed; the answer decides the job's outcome (docs/push.md).

- Endpoints are read from the database at start, on every change announced on the LISTEN
  connection, and every --worker-poll-secs while there are any (so a breaker another replica
  opened is seen); with none, only when one is announced (or the LISTEN connection is down).
- Each (endpoint, queue) has a loop that claims at most the endpoint's free slots
  (shared/db/push.py: the database holds the concurrency across every replica), parks on the
  queue's wake-ups while it has nothing due, and waits for a slot while the endpoint is full.
- A delivery is a task: the request (no redirects followed, the endpoint's time-out, every
  connection's addresses judged by the SSRF rules), then its history row and its outcome: a
  completion (2xx), nothing (202: the receiver finishes it with the lease token), or a failure
  through the retry policy (Retry-After as the delay).
- The breaker: retryable failures in a row open it (--push-breaker-failures); while open no job of
  the endpoint is claimed, so they wait without spending retries; then one delivery at a time
  (half-open) until one succeeds.
- Shutdown stops claiming, lets deliveries in flight finish for up to --shutdown-grace-secs, then
  cancels the rest and gives their jobs back (claimable again at once, no retry spent).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import os
import ssl
import time
import uuid
from datetime import UTC, datetime
from urllib.parse import urlsplit

import aiohttp
import msgspec
import structlog

import shared
from shared import metrics, wire
from shared.config import Settings
from shared.db import jobs as jobs_db
from shared.db import push as push_db
from shared.db.database import Database
from shared.db.pool import is_database_error, is_unavailable, until_answered
from shared.domain.errors import DomainError
from shared.domain.jobs import Lease
from shared.domain.push import (
    KEPT_BODY_BYTES,
    Outcome,
    breaker_open_secs,
    failure_message,
    kept_body,
    outcome_of,
    retry_after_secs,
    secret_key,
    signature_header,
    webhook_id,
)
from shared.runtime.keys import Lifecycle
from shared.runtime.push_net import GuardedResolver, RefusedAddress, check_literal

log = structlog.get_logger("queueflow.pusher")

# While an endpoint is full with deliveries of other pushers (or half-open with its one delivery
# elsewhere), its loop asks the database again this often.
FULL_POLL_SECS = 0.25
PRUNE_EVERY_SECS = 60.0
PRUNE_BATCH = 1000
_encode = msgspec.json.Encoder().encode


@dataclasses.dataclass(eq=False)
class _Endpoint:
    """What this process knows of an endpoint: its latest row, its signing keys, and how many of
    its deliveries this process is making."""

    target: push_db.Target
    keys: tuple[bytes, ...]  # `target.secrets`' decoded keys, in their order
    labels: tuple[str, str]
    in_flight: int = 0
    freed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def refresh(self, target: push_db.Target) -> None:
        """`target` as read since: what the next deliveries are sent with."""
        if target.secrets != self.target.secrets:
            self.keys = tuple(secret_key(s) for s in target.secrets)
        self.target = target
        self.changed.set()

    def signing_keys(self, now: datetime) -> tuple[bytes, ...]:
        return self.keys[: len(self.target.signing_secrets(now))]


@dataclasses.dataclass(frozen=True, slots=True)
class _Answer:
    """What came back from one request."""

    status: int | None = None
    body: bytes = b""
    retry_after: str | None = None
    error: str | None = None  # no answer: why
    refused: bool = False  # the address may not be reached: not retryable


class Pusher:
    def __init__(self, db: Database, settings: Settings, lifecycle: Lifecycle) -> None:
        self.db = db
        self.settings = settings
        self.lifecycle = lifecycle
        self.process_id = f"pusher:{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._allowed = settings.push_allowed
        self._endpoints: dict[uuid.UUID, _Endpoint] = {}
        self._loops: dict[tuple[uuid.UUID, str], asyncio.Task[None]] = {}
        self._deliveries: dict[asyncio.Task[None], Lease] = {}
        self._reload = asyncio.Event()
        self._rotation = itertools.count()
        self._background: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self._history: push_db.DeliveryWriter | None = None
        self._completions: push_db.CompletedDeliveries | None = None
        self._unwatch: list[object] = []
        self._stopping = False
        self._read_limit = max(settings.max_result_bytes + 1, KEPT_BODY_BYTES)

    def describe(self) -> dict[str, object]:
        return {
            "worker_id": self.process_id,
            "connections": self.settings.push_connections,
            "allow_cidrs": list(self.settings.push_allow_cidrs),
            "ca_file": self.settings.push_ca_file,
        }

    async def start(self) -> None:
        context = ssl.create_default_context()
        if self.settings.push_ca_file:
            context.load_verify_locations(cafile=self.settings.push_ca_file)
        connector = aiohttp.TCPConnector(
            limit=self.settings.push_connections,
            limit_per_host=0,
            resolver=GuardedResolver(self._allowed),
            use_dns_cache=False,  # every new connection resolves, and is judged, again
            ssl=context,
            keepalive_timeout=30,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            auto_decompress=True,
            headers={"User-Agent": f"QueueFlow-Pusher/{shared.__version__}"},
        )
        self._history = push_db.DeliveryWriter(self.db.pool)
        self._completions = push_db.CompletedDeliveries(self.db.pool, self.db.tracer)
        unwatch = self.db.hub.watch_push(lambda _: self._reload.set())
        self._unwatch.append(unwatch)
        self._background = [
            asyncio.create_task(self._supervise(), name="queueflow-pusher-endpoints"),
            asyncio.create_task(self._prune(), name="queueflow-pusher-prune"),
        ]

    async def stop(self) -> None:
        self._stopping = True
        for task in [*self._background, *self._loops.values()]:
            task.cancel()
        for task in [*self._background, *self._loops.values()]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._deliveries:
            log.info("pusher_draining", deliveries=len(self._deliveries))
            _, pending = await asyncio.wait(list(self._deliveries), timeout=self.settings.shutdown_grace_secs)
            if pending:
                given = [(self._deliveries[t].job.id, self._deliveries[t].token) for t in pending]
                for task in pending:
                    task.cancel()
                await asyncio.wait(pending, timeout=2)
                released = 0
                with contextlib.suppress(Exception):
                    released = await jobs_db.release(self.db.pool, given)
                log.warning("pusher_released_jobs", jobs=len(given), released=released)
        for unwatch in self._unwatch:
            unwatch()  # type: ignore[operator]
        if self._completions is not None:
            await self._completions.close()
        if self._history is not None:
            await self._history.close()
        if self._session is not None:
            await self._session.close()

    # -- endpoints --------------------------------------------------------------------------------

    async def _supervise(self) -> None:
        while True:
            self._reload.clear()
            try:
                targets = await push_db.active_targets(self.db.pool)
            except Exception as err:
                log.warning("push_endpoints_read_failed", error=str(err), exc_info=not is_database_error(err))
                await asyncio.sleep(1.0)
                continue
            self._apply(targets)
            # With no endpoint to deliver to there is no breaker to watch either: a new or resumed
            # endpoint is announced, and so is a lost LISTEN connection, so wait for that alone
            # (what a deployment that never pushes pays: nothing). Without the connection, poll.
            poll: float | None = self.settings.worker_poll_secs
            if not targets and self.db.hub.connected:
                poll = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await self._reload.wait()

    def _apply(self, targets: list[push_db.Target]) -> None:
        """Start a loop for each bound queue of each active endpoint; stop those of endpoints
        paused, removed, or no longer bound to that queue."""
        wanted: set[tuple[uuid.UUID, str]] = set()
        seen: set[uuid.UUID] = set()
        for target in targets:
            seen.add(target.id)
            endpoint = self._endpoints.get(target.id)
            if endpoint is None:
                endpoint = self._endpoints[target.id] = _Endpoint(
                    target,
                    tuple(secret_key(s) for s in target.secrets),
                    metrics.endpoint_labels(
                        target.tenant, target.name, tenant_ids=self.settings.metrics_tenant_ids
                    ),
                )
            else:
                endpoint.refresh(target)
            metrics.PUSH_BREAKER_OPEN.labels(*endpoint.labels).set(1 if target.open_until is not None else 0)
            for queue in target.queues:
                key = (target.id, queue)
                wanted.add(key)
                if key not in self._loops and not self._stopping:
                    self._loops[key] = asyncio.create_task(
                        self._drain(endpoint, queue), name=f"queueflow-push-{target.id}-{queue}"
                    )
        for key in [k for k in self._loops if k not in wanted]:
            self._loops.pop(key).cancel()
        for gone in [e for e in self._endpoints if e not in seen]:
            endpoint = self._endpoints.pop(gone)
            endpoint.changed.set()

    # -- claiming ---------------------------------------------------------------------------------

    async def _drain(self, endpoint: _Endpoint, queue: str) -> None:
        hub = self.db.hub
        while not self._stopping and not self.lifecycle.draining:
            target = endpoint.target
            if target.open_until is not None:
                wait = (target.open_until - datetime.now(UTC)).total_seconds()
                if wait > 0:  # open: its jobs wait, spending no retries
                    await _wait_event(endpoint.changed, wait)
                    continue
            want = target.concurrency - endpoint.in_flight
            if want <= 0:
                await _wait_event(endpoint.freed, self.settings.worker_poll_secs)
                continue
            seen = hub.epoch(queue)  # read before the claim: a notification after it is never lost
            try:
                claimed = await push_db.claim(
                    self.db.pool,
                    target,
                    queue,
                    want,
                    target.timeout_secs + self.settings.lease_grace_secs,
                    next(self._rotation),
                    self.process_id,
                )
            except Exception as err:
                log.warning(
                    "push_claim_failed", queue=queue, error=str(err), exc_info=not is_database_error(err)
                )
                await asyncio.sleep(1.0)
                continue
            if claimed.changed is not None:  # changed since it was read: sent as it is now
                endpoint.refresh(claimed.changed)
            for lease in claimed.leases:
                self._start_delivery(endpoint, lease)
            if claimed.leases:
                continue
            if claimed.free <= 0:  # full with deliveries elsewhere, half-open, paused or gone
                await _wait_event(endpoint.freed, FULL_POLL_SECS)
            else:  # nothing due: park until the queue is announced (or the safety poll)
                await hub.wait(queue, seen, self.settings.worker_poll_secs, observe=True)

    def _start_delivery(self, endpoint: _Endpoint, lease: Lease) -> None:
        endpoint.in_flight += 1
        metrics.PUSH_IN_FLIGHT.labels(*endpoint.labels).inc()
        task = asyncio.create_task(self._deliver(endpoint, lease))
        self._deliveries[task] = lease

        def ended(done: asyncio.Task[None]) -> None:
            self._deliveries.pop(done, None)
            endpoint.in_flight -= 1
            metrics.PUSH_IN_FLIGHT.labels(*endpoint.labels).dec()
            endpoint.freed.set()
            if not done.cancelled() and done.exception() is not None:
                log.error("push_delivery_crashed", job_id=str(lease.job.id), error=repr(done.exception()))

        task.add_done_callback(ended)

    # -- one delivery -----------------------------------------------------------------------------

    async def _deliver(self, endpoint: _Endpoint, lease: Lease) -> None:
        target, job = endpoint.target, lease.job
        attempt = job.delivery_count
        message_id = webhook_id(job.id, attempt)
        body = _encode(wire.PushDeliveryBody(job=job, lease_token=str(lease.token), attempt=attempt))
        timestamp = int(time.time())
        headers = {
            **target.headers,
            "Content-Type": "application/json",
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature_header(
                endpoint.signing_keys(datetime.now(UTC)), message_id, timestamp, body
            ),
        }
        if lease.trace is not None:
            headers["traceparent"] = lease.trace.traceparent
            if lease.trace.tracestate:
                headers["tracestate"] = lease.trace.tracestate
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = await self._post(target, body, headers)
        latency = loop.time() - started
        metrics.PUSH_DURATION.labels(*endpoint.labels).observe(latency)
        verdict = self._judge(answer)
        history: push_db.DeliveryRow = (
            target.id,
            job.id,
            attempt,
            message_id,
            answer.status,
            latency * 1000,
            kept_body(answer.body),
            verdict.outcome,
            verdict.error,
        )
        await self._feed_breaker(endpoint, verdict)
        outcome = await self._write(lease, verdict, history)
        metrics.PUSH_DELIVERIES.labels(*endpoint.labels, outcome).inc()
        # A completed delivery logs at debug: a drain of many jobs is not as many log lines.
        (log.debug if outcome == Outcome.COMPLETED else log.info)(
            "job_pushed",
            job_id=str(job.id),
            endpoint_id=str(target.id),
            attempt=attempt,
            status=answer.status,
            outcome=outcome,
            latency_ms=round(latency * 1000, 1),
            error=verdict.error,
        )

    async def _post(self, target: push_db.Target, body: bytes, headers: dict[str, str]) -> _Answer:
        assert self._session is not None
        try:
            check_literal(urlsplit(target.url).hostname or "", self._allowed)
            async with self._session.post(
                target.url,
                data=body,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=target.timeout_secs),
            ) as response:
                read = await response.content.read(self._read_limit)
                return _Answer(response.status, read, response.headers.get("Retry-After"))
        except RefusedAddress as refused:
            return _Answer(error=f"refused: {refused}", refused=True)
        except aiohttp.ClientConnectorError as err:
            if isinstance(err.os_error, RefusedAddress):
                return _Answer(error=f"refused: {err.os_error}", refused=True)
            return _Answer(error=f"connection failed: {err.os_error}")
        except TimeoutError:
            return _Answer(error=f"timed out after {target.timeout_secs}s")
        except (aiohttp.ClientError, OSError, ValueError) as err:
            return _Answer(error=f"connection failed: {str(err) or type(err).__name__}")

    def _judge(self, answer: _Answer) -> _Verdict:
        """What `answer` does to the job (docs/push.md, "What each answer does")."""
        body = kept_body(answer.body)
        if answer.status is None:
            error = failure_message(None, None, answer.error)
            if answer.refused:
                return _Verdict(Outcome.FAILED, error, refused=True)
            return _Verdict(Outcome.RETRY, error, endpoint_failed=True)
        if 300 <= answer.status < 400:
            return _Verdict(
                Outcome.FAILED, failure_message(answer.status, body, "redirects are not followed")
            )
        outcome = outcome_of(answer.status)
        if outcome is Outcome.RETRY:
            delay = retry_after_secs(answer.retry_after, datetime.now(UTC))
            return _Verdict(Outcome.RETRY, failure_message(answer.status, body), delay, endpoint_failed=True)
        if outcome is Outcome.FAILED:
            return _Verdict(Outcome.FAILED, failure_message(answer.status, body))
        if outcome is Outcome.ACCEPTED:
            return _Verdict(Outcome.ACCEPTED)
        result, problem = self._result_of(answer.body)
        if result is None:
            return _Verdict(Outcome.FAILED, failure_message(answer.status, body, problem))
        return _Verdict(Outcome.COMPLETED, result=result)

    async def _write(self, lease: Lease, verdict: _Verdict, history: push_db.DeliveryRow) -> str:
        """The delivery's history row, then the job's outcome: what the answer decided, or `lost`
        when the job was no longer the delivery's. (The history first: whoever reads the job's
        outcome finds the delivery beside it. A completion writes both in one commit.)"""
        if verdict.outcome is Outcome.COMPLETED:
            assert verdict.result is not None
            return await self._complete(lease, verdict.result, history)
        await self._record(history)
        if verdict.outcome is Outcome.ACCEPTED:
            return Outcome.ACCEPTED
        assert verdict.error is not None
        return await self._fail(lease, verdict.error, verdict.outcome is Outcome.RETRY, verdict.delay)

    async def _record(self, history: push_db.DeliveryRow) -> None:
        assert self._history is not None
        try:
            await self._history.submit(history)
        except Exception as err:  # the outcome matters more than its history
            log.warning("push_history_write_failed", error=str(err), exc_info=not is_database_error(err))

    def _result_of(self, raw: bytes) -> tuple[msgspec.Raw | None, str]:
        """A 2xx body as the job's result (empty: null), or None and what is wrong with it."""
        if not raw.strip():
            return msgspec.Raw(b"null"), ""
        if len(raw) > self.settings.max_result_bytes:
            return None, f"its body is over the {self.settings.max_result_bytes}-byte result cap"
        try:
            decoded = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return None, "its body is not JSON"
        if decoded is not None and not isinstance(decoded, dict):
            return None, "its body is not a JSON object"
        return msgspec.Raw(raw), ""

    async def _complete(self, lease: Lease, result: msgspec.Raw, history: push_db.DeliveryRow) -> str:
        assert self._completions is not None
        completions = self._completions
        completion = (lease.job.id, lease.token, result)
        pending: list[push_db.DeliveryRow] = [history]

        async def write() -> None:
            # The history row goes with the first try only: a try the database may have committed
            # before it became unreachable is repeated as a plain completion (a replay by the
            # lease's token is a success), so the row is never written twice.
            if pending:
                await completions.submit((pending.pop(), completion))
            else:
                await self.db.completer.submit(completion)

        try:
            await until_answered(write)
        except DomainError:  # cancelled or reclaimed meanwhile: the server owns it
            return Outcome.LOST
        except Exception as err:
            if is_unavailable(err):
                raise
            # A body the database will not store (a NUL character in a string): not retryable. Its
            # transaction took the history row with it: write that on its own first.
            await self._record(history)
            return await self._fail(lease, f"push delivery's result could not be stored: {err}", False, None)
        return Outcome.COMPLETED

    async def _fail(self, lease: Lease, error: str, retryable: bool, delay: int | None) -> str:
        try:
            await until_answered(
                lambda: push_db.fail(self.db.pool, lease.job.id, lease.token, error, retryable, delay)
            )
        except DomainError:
            return Outcome.LOST
        return Outcome.RETRY if retryable else Outcome.FAILED

    # -- the breaker ------------------------------------------------------------------------------

    async def _feed_breaker(self, endpoint: _Endpoint, verdict: _Verdict) -> None:
        """Retryable failures in a row open the breaker; any answer the receiver chose (a 2xx, a
        4xx, a redirect) closes it. A refused address says nothing of the receiver."""
        if verdict.endpoint_failed:
            await self._breaker_failed(endpoint)
        elif not verdict.refused:
            await self._breaker_ok(endpoint)

    async def _breaker_failed(self, endpoint: _Endpoint) -> None:
        threshold = self.settings.push_breaker_failures
        if threshold <= 0:
            return
        target_id = endpoint.target.id
        try:
            # One transaction: a reader never sees the new count beside the last opening's end.
            async with self.db.pool.acquire() as conn, conn.transaction():
                failures = await push_db.endpoint_failed(conn, target_id)
                open_until = endpoint.target.open_until
                if failures >= threshold:
                    secs = breaker_open_secs(failures, threshold, self.settings.push_breaker_secs)
                    open_until = await push_db.open_breaker(conn, target_id, secs)
                    log.warning(
                        "push_breaker_opened", endpoint_id=str(target_id), failures=failures, open_secs=secs
                    )
        except Exception as err:
            log.warning("push_breaker_write_failed", error=str(err), exc_info=not is_database_error(err))
            return
        endpoint.target = dataclasses.replace(endpoint.target, failures=failures, open_until=open_until)
        metrics.PUSH_BREAKER_OPEN.labels(*endpoint.labels).set(1 if open_until is not None else 0)
        endpoint.changed.set()

    async def _breaker_ok(self, endpoint: _Endpoint) -> None:
        target = endpoint.target
        if target.failures == 0 and target.open_until is None:
            return
        try:
            await push_db.close_breaker(self.db.pool, target.id)
        except Exception as err:
            log.warning("push_breaker_write_failed", error=str(err), exc_info=not is_database_error(err))
            return
        if target.open_until is not None:
            log.info("push_breaker_closed", endpoint_id=str(target.id))
        endpoint.target = dataclasses.replace(endpoint.target, failures=0, open_until=None)
        metrics.PUSH_BREAKER_OPEN.labels(*endpoint.labels).set(0)
        endpoint.changed.set()

    # -- housekeeping -----------------------------------------------------------------------------

    async def _prune(self) -> None:
        while True:
            await asyncio.sleep(PRUNE_EVERY_SECS)
            try:
                while await push_db.prune_deliveries(self.db.pool, PRUNE_BATCH) >= PRUNE_BATCH:
                    pass
            except Exception as err:
                log.warning("push_prune_failed", error=str(err), exc_info=not is_database_error(err))


async def _wait_event(event: asyncio.Event, timeout: float) -> None:
    event.clear()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


@dataclasses.dataclass(frozen=True, slots=True)
class _Verdict:
    """What an answer does: the outcome, the job's error when it fails, the receiver's retry delay,
    whether it counts against the endpoint's breaker (or, a refused address, says nothing of it),
    and the result to complete with."""

    outcome: Outcome
    error: str | None = None
    delay: int | None = None
    endpoint_failed: bool = False
    refused: bool = False
    result: msgspec.Raw | None = None
