"""The in-process worker runtime: per queue, lease up to --workers jobs at a time and run their
handlers concurrently, with the same guarantees as remote workers.

- The registry holds the built-ins and the tasks of the --handlers modules; it is built when the
  process composes its services, so a bad module stops `serve` before anything opens.
- Async handlers run on the event loop; sync ones in this runtime's thread pool (one thread per
  handler slot, threads named `queueflow-task-N`).
- The lease covers the job's timeout plus --lease-grace-secs, so a healthy handler never needs a
  heartbeat; a crashed process's jobs are reclaimed by the janitor through the retry policy.
- A task's `timeout_secs` overrides the job's; exceeding it cancels the handler and fails the job
  retryably ("job exceeded its timeout of Ns").
- A task's `concurrency` caps how many of its handlers run at once in this process, on top of
  --workers per queue. A leased job waiting for a slot keeps its lease alive with heartbeats and
  gets a fresh lease (timeout + grace) when its handler starts.
- Cancelling a running job through the API cancels its handler: the job-events notification for
  the job reaches this process, which cancels an async handler's task, sets `ctx.is_cancelled`
  for a sync one, and reports nothing (the server already owns the outcome).
- Shutdown stops leasing and gives back at once the jobs still waiting for a task slot, then
  waits up to --shutdown-grace-secs for running handlers; what is still running after that is
  cancelled and released (claimable again at once, no retry spent).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import msgspec
import structlog

from services.worker.builtins import register_builtins
from services.worker.registry import JobContext, Registry, Task, import_handler_modules
from shared import logs, metrics
from shared.config import Settings
from shared.db import jobs as jobs_db
from shared.db import workers
from shared.db.database import Database
from shared.db.pool import is_database_error, until_answered
from shared.domain.errors import DomainError
from shared.domain.jobs import DeadLetterReason, Job, JobStatus, Lease
from shared.runtime.keys import Lifecycle
from shared.runtime.leasing import lease_jobs

log = structlog.get_logger("queueflow.worker")

TASK_HEARTBEAT_SECS = 10.0
T = TypeVar("T")
_encode_result = msgspec.json.Encoder().encode


class WorkerRuntime:
    def __init__(self, db: Database, settings: Settings, lifecycle: Lifecycle, registry: Registry) -> None:
        self.db = db
        self.settings = settings
        self.lifecycle = lifecycle
        self.registry = registry
        self.process_id = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._loops: list[asyncio.Task[None]] = []
        self._inflight: set[asyncio.Task[None]] = set()
        self._leases: dict[asyncio.Task[None], tuple[uuid.UUID, uuid.UUID]] = {}
        self._waiting: set[asyncio.Task[Any]] = set()  # leased, waiting for a task slot
        self._slots = {t.name: Slots(t.concurrency) for t in registry if t.concurrency}
        # Per queue, at most --workers handlers run at once; up to as many more jobs are held,
        # claimed ahead so the next claim's commit overlaps the running handlers.
        self._gates = {q: Slots(settings.workers) for q in settings.worker_queues}
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None
        self._durations: dict[str, Any] = {}
        self._stopping = False

    async def start(self) -> None:
        s = self.settings
        if any(not t.is_async for t in self.registry):
            self._threads = concurrent.futures.ThreadPoolExecutor(
                max_workers=s.workers * len(s.worker_queues), thread_name_prefix="queueflow-task"
            )
        await self._register_tasks()
        self._loops = [
            asyncio.create_task(self._queue_loop(q), name=f"queueflow-worker-{q}") for q in s.worker_queues
        ]
        self._loops.append(asyncio.create_task(self._task_heartbeat(), name="queueflow-task-heartbeat"))

    def _duration(self, task: str) -> Any:
        """The handler-duration histogram of `task` (its labelled child, looked up once)."""
        child = self._durations.get(task)
        if child is None:
            child = self._durations[task] = metrics.HANDLER_DURATION.labels(task)
        return child

    def describe(self) -> dict[str, object]:
        s = self.settings
        return {
            "queues": list(s.worker_queues),
            "workers": s.workers,
            "tasks": self.registry.names(),
            "handler_modules": list(s.handlers),
        }

    async def stop(self) -> None:
        """Stop leasing; give back the jobs waiting for a task slot; drain running handlers for up
        to the grace period, then cancel and give back the rest."""
        self._stopping = True
        for t in self._loops:
            t.cancel()
        for t in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        leases = dict(self._leases)  # entries leave the dict as their tasks finish
        give_back = {t for t in self._inflight if t in self._waiting}
        for t in give_back:
            t.cancel()
        running = self._inflight - give_back
        if running:
            log.info("worker_draining", jobs=len(running))
            _, pending = await asyncio.wait(running, timeout=self.settings.shutdown_grace_secs)
            for t in pending:
                t.cancel()
            give_back |= pending
        if give_back:
            await asyncio.wait(give_back, timeout=2)
            released = 0
            for t in give_back:
                if t in leases:
                    job_id, token = leases[t]
                    with contextlib.suppress(Exception):
                        released += await jobs_db.release(self.db.pool, job_id, token)
            log.warning("worker_released_jobs", jobs=len(give_back), released=released)
        with contextlib.suppress(Exception):
            await workers.unregister_tasks(self.db.pool, self.process_id)
        if self._threads is not None:
            # A sync handler cannot be interrupted: its thread finishes on its own (it was told
            # through ctx.is_cancelled); nothing queued behind it is started.
            self._threads.shutdown(wait=False, cancel_futures=True)

    async def _register_tasks(self) -> None:
        await workers.register_tasks(
            self.db.pool, self.process_id, self.registry.names(), self.settings.worker_queues
        )

    async def _task_heartbeat(self) -> None:
        while True:
            await asyncio.sleep(TASK_HEARTBEAT_SECS)
            try:
                await self._register_tasks()
            except Exception as err:
                if not is_database_error(err):
                    raise
                log.warning("task_heartbeat_failed", error=str(err))

    async def _queue_loop(self, queue: str) -> None:
        s = self.settings
        # Claimed ahead: up to --workers jobs waiting behind the running ones. Finished jobs whose
        # outcome is still being written are held up to 8 x --workers, so claims overlap the
        # completions; a claim waits for --workers free places, so each statement carries a batch
        # worth its fixed cost (at 16 jobs a claim, a statement log measured 75 us a job in PostgreSQL).
        budget = _Budget(ahead=2 * s.workers, held=HELD_PER_WORKER * s.workers)
        while not self._stopping and not self.lifecycle.draining:
            free = budget.free
            if free < s.workers:
                await budget.wait()
                continue
            try:
                leases = await lease_jobs(
                    self.db,
                    self.lifecycle,
                    queue,
                    free,
                    s.lease_secs,
                    s.worker_poll_secs,
                    s.worker_poll_secs,
                    timeout_grace=s.lease_grace_secs,
                )
            except Exception as err:
                # A claim that failed must never end the queue's loop: an unreachable database is
                # warned about, anything else logged with its traceback; both are tried again.
                log.warning("claim_failed", queue=queue, error=str(err), exc_info=not is_database_error(err))
                await asyncio.sleep(1.0)
                continue
            claimed_at = asyncio.get_running_loop().time()
            for lease in leases:
                handled, ended = budget.take()
                task = asyncio.create_task(self._run(lease, claimed_at, handled))
                self._inflight.add(task)
                self._leases[task] = (lease.job.id, lease.token)
                task.add_done_callback(self._forget)
                task.add_done_callback(ended)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._leases.pop(task, None)
        self._waiting.discard(task)

    async def _run(self, lease: Lease, claimed_at: float, handled: Callable[[], None]) -> None:
        job, token = lease.job, lease.token
        # Every log line of this job (the runtime's and its handler's) names it.
        logs.bind(job_id=str(job.id), task=job.task_name, queue=job.queue_name)
        task = self.registry.get(job.task_name)
        try:
            if task is None:
                await self._fail(
                    job.id,
                    token,
                    f"no handler registered for task '{job.task_name}'",
                    False,
                    reason=DeadLetterReason.HANDLER_NOT_FOUND,
                )
                log.warning("job_dead_lettered", reason=DeadLetterReason.HANDLER_NOT_FOUND)
                return
            await self._execute(task, job, token, claimed_at, handled)
        except Exception:  # a bug in a report (an unreachable database is waited out, not here)
            log.exception("job_report_failed")

    async def _execute(
        self, task: Task, job: Job, token: uuid.UUID, claimed_at: float, handled: Callable[[], None]
    ) -> None:
        job_id = job.id
        ctx = JobContext(job)
        timeout = max(1, task.timeout_secs or job.config.timeout_secs)
        handler: asyncio.Future[Any] | None = None

        def on_status(status: str) -> None:
            if status == "cancelled":
                ctx.abandon()
                if handler is not None:
                    handler.cancel()

        unsubscribe = self.db.hub.watch_job(str(job_id), on_status)
        held: list[Slots] = []  # the run slots this job holds, given back when it ends

        def release_all() -> None:
            while held:
                held.pop().release()

        release: Callable[[], None] | None = release_all
        loop = asyncio.get_running_loop()
        try:
            # The claim leased the job for its own timeout plus the grace; a longer task timeout,
            # or a wait for a run or task slot that ate into the grace, needs a fresh lease before
            # the handler starts (while it waits, _take_slot keeps the lease alive). A short wait
            # (a job claimed ahead) needs none: the grace covers it, and a heartbeat per job
            # would cost a statement per job.
            extend = task.timeout_secs is not None and task.timeout_secs > job.config.timeout_secs
            for slots in (self._gates.get(job.queue_name), self._slots.get(task.name)):
                if slots is None:
                    continue
                waited = slots.locked()
                if not await self._take_slot(slots, ctx, job_id, token, timeout):
                    log.info("job_handler_cancelled", started=False)
                    return
                held.append(slots)
                waited_long = loop.time() - claimed_at > self.settings.lease_grace_secs / 2
                extend = extend or (waited and waited_long)
            if extend and not await self._extend_lease(job_id, token, timeout):
                log.info("job_handler_cancelled", started=False)
                return
            handler = self._start(task, ctx, release)
            release = None  # the handler owns the slot now and gives it back when it finishes
            handler.add_done_callback(_observed)
            await self._await_handler(task, ctx, handler, job_id, token, timeout, handled)
        finally:
            unsubscribe()
            if release is not None:
                release()

    async def _take_slot(
        self, slots: Slots, ctx: JobContext, job_id: uuid.UUID, token: uuid.UUID, timeout: int
    ) -> bool:
        """Wait for a free slot of a concurrency-limited task while keeping the job's lease alive.
        False when the job was cancelled or its lease lost meanwhile (no slot is then held)."""
        if not slots.locked():
            await slots.acquire()  # free: returns without suspending
            return True
        current = asyncio.current_task()
        assert current is not None
        self._waiting.add(current)
        keepalive = max(1.0, min(30.0, (timeout + self.settings.lease_grace_secs) / 3))
        try:
            while True:
                try:
                    async with asyncio.timeout(keepalive):
                        await slots.acquire()
                except TimeoutError:
                    if ctx.cancelled.is_set() or not await self._extend_lease(job_id, token, timeout):
                        return False
                    continue
                if ctx.cancelled.is_set():  # cancelled through the API while it waited
                    slots.release()
                    return False
                return True
        finally:
            self._waiting.discard(current)

    async def _extend_lease(self, job_id: uuid.UUID, token: uuid.UUID, timeout: int) -> bool:
        """Lease the job for its timeout plus the grace, from now; False when it is no longer ours
        (cancelled through the API, or reclaimed)."""
        try:
            status = await _written(
                "lease_extension",
                lambda: jobs_db.heartbeat(
                    self.db.pool, job_id, token, timeout + self.settings.lease_grace_secs, jobs_db.LEASE_LOST
                ),
            )
        except DomainError:
            return False
        return status is JobStatus.RUNNING

    def _start(self, task: Task, ctx: JobContext, release: Callable[[], None] | None) -> asyncio.Future[Any]:
        """Start the handler. `release` runs when it has really finished: for a sync handler that is
        when its thread returns, even if the job was given up earlier, so a task's concurrency
        counts every handler still running."""
        if task.is_async:
            running: asyncio.Future[Any] = asyncio.ensure_future(_call_async(task, ctx))
            if release is not None:
                running.add_done_callback(lambda _: release())
            return running
        assert self._threads is not None
        loop = asyncio.get_running_loop()
        thread_job = self._threads.submit(contextvars.copy_context().run, task.handler, ctx)
        if release is not None:

            def released(_: concurrent.futures.Future[Any]) -> None:
                with contextlib.suppress(RuntimeError):  # the loop is gone: nothing left to release
                    loop.call_soon_threadsafe(release)

            thread_job.add_done_callback(released)
        return asyncio.wrap_future(thread_job, loop=loop)

    async def _await_handler(
        self,
        task: Task,
        ctx: JobContext,
        handler: asyncio.Future[Any],
        job_id: uuid.UUID,
        token: uuid.UUID,
        timeout: int,
        handled: Callable[[], None],
    ) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            ctx.abandon()
            handler.cancel()

        # One timer per job, not asyncio.wait's futures and callbacks: this is the hot path.
        timer = loop.call_later(timeout, expire)
        current = asyncio.current_task()
        try:
            await asyncio.shield(handler)  # a shutdown cancels this task: abandon first, then the handler
        except asyncio.CancelledError:
            if current is not None and current.cancelling():  # shutdown: stop() gives the lease back
                ctx.abandon()
                handler.cancel()
                raise
            # the handler itself ended cancelled (its time-out, the API's cancel, or its own doing)
        except Exception:  # read below, from the handler
            pass
        finally:
            timer.cancel()
            self._duration(task.name).observe(loop.time() - started)
            handled()  # what is left is reporting: the queue loop may claim the next job
        if expired:
            await self._fail(job_id, token, f"job exceeded its timeout of {timeout}s", True)
            return
        if ctx.cancelled.is_set():
            # Cancelled through the API: whatever the handler did last, the server owns the outcome.
            log.info("job_handler_cancelled", started=True)
            return
        if handler.cancelled():
            await self._fail(job_id, token, "handler was cancelled", True)
            return
        err = handler.exception()
        if err is not None:
            retryable = getattr(err, "retryable", True) is not False
            await self._fail(job_id, token, str(err) or type(err).__name__, retryable)
            return
        result = handler.result()
        if result is not None and not isinstance(result, dict):
            await self._fail(job_id, token, f"handler returned {type(result).__name__}, not an object", False)
            return
        problem = _unstorable(result or {})
        if problem is not None:
            await self._fail(
                job_id, token, f"handler returned a result that cannot be stored: {problem}", False
            )
            return
        try:
            await _written("completion", lambda: self.db.completer.complete(job_id, token, result or {}))
        except DomainError as refused:  # cancelled or reclaimed meanwhile: the server owns the outcome
            log.info("job_completion_refused", reason=refused.message)

    async def _fail(
        self, job_id: uuid.UUID, token: uuid.UUID, error: str, retryable: bool, reason: str | None = None
    ) -> None:
        try:
            outcome: str = await _written(
                "failure", lambda: jobs_db.fail(self.db.pool, job_id, token, error, retryable, reason)
            )
        except DomainError as err:
            outcome = err.message
        log.info("job_failed", outcome=outcome, retryable=retryable)


# Jobs a queue loop may hold per --workers, counting finished ones whose outcome is being written.
HELD_PER_WORKER = 8


class Slots:
    """Run slots: a FIFO counting semaphore whose `locked()` costs O(1) (asyncio.Semaphore.locked
    walks every waiter on Python 3.11, and the runtime asks it for every job: with a few dozen
    jobs claimed ahead that was a tenth of the drain's CPU). A released slot goes straight to the
    first waiter."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    def locked(self) -> bool:
        return self._free == 0

    async def acquire(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot in the same instant it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            raise

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1


class _Budget:
    """How many more jobs a queue loop may claim. A job counts as *unfinished* from its claim until
    its handler finishes, and as *held* until its task ends (its outcome written). Unfinished jobs
    are capped at `ahead` (running plus claimed ahead), held ones at `held`: a finished job stops
    holding a run slot, so the next claim overlaps the previous jobs' completions, but only so far,
    or a database slower to write outcomes than to hand out jobs would let claims run away from
    the completions (each claimed job a lease ticking)."""

    def __init__(self, ahead: int, held: int) -> None:
        self.ahead = ahead
        self.held = max(held, ahead)
        self._unfinished = 0
        self._held = 0
        self._freed = asyncio.Event()

    @property
    def free(self) -> int:
        return min(self.ahead - self._unfinished, self.held - self._held)

    async def wait(self) -> None:
        """Until at least one job has been counted out."""
        self._freed.clear()
        await self._freed.wait()

    def take(self) -> tuple[Callable[[], None], Callable[[asyncio.Task[None]], None]]:
        """Count one job in: returns `handled` (its handler finished; idempotent) and `ended`, the
        done-callback of its task, which counts it out entirely (a task that ended before its
        handler finished, e.g. cancelled while it waited, counts as handled too)."""
        self._unfinished += 1
        self._held += 1
        finished = False

        def handled() -> None:
            nonlocal finished
            if not finished:
                finished = True
                self._unfinished -= 1
                self._freed.set()

        def ended(_task: asyncio.Task[None]) -> None:
            handled()
            self._held -= 1
            self._freed.set()

        return handled, ended


async def _written(what: str, write: Callable[[], Awaitable[T]]) -> T:
    """`write()`, tried again while the database is unreachable until it lands or answers.
    Outcome writes are idempotent under the lease token: a retry of one that committed before the
    connection dropped is answered as a replay or refused as stale, never applied twice. Dropping
    it instead would leave the job to its lease's expiry (timeout + grace) and spend a retry. A
    shutdown cancels the wait."""

    def retrying(err: BaseException, delay: float) -> None:
        log.warning("job_report_retrying", write=what, error=str(err), retry_in_secs=delay)

    return await until_answered(write, retrying)


def _observed(handler: asyncio.Future[Any]) -> None:
    """Mark the outcome seen: a handler that raises after it was timed out or cancelled has no
    one left to report to, and asyncio would log "exception was never retrieved"."""
    if not handler.cancelled():
        handler.exception()


async def _call_async(task: Task, ctx: JobContext) -> Any:
    handler = cast(Callable[[JobContext], Awaitable[Any]], task.handler)  # is_async said so
    return await handler(ctx)


def _unstorable(result: dict[str, Any]) -> str | None:
    """Why `result` cannot be a jsonb value, or None. Checked before the group commit, where one bad
    value would fail every completion of its batch."""
    try:
        encoded = _encode_result(result)
    except (TypeError, ValueError, OverflowError) as err:
        return str(err)
    if b"\\u0000" in encoded:
        return "a string contains a NUL character"
    return None


def build_registry(handler_modules: tuple[str, ...] = ()) -> Registry:
    """The built-ins, then every task of the --handlers modules (ConfigError naming a bad one)."""
    registry = Registry()
    register_builtins(registry)
    import_handler_modules(registry, handler_modules)
    return registry


def default_registry() -> Registry:
    return build_registry()
