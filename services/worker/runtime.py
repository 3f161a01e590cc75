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
import functools
import heapq
import math
import os
import types
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar, cast

import msgspec
import structlog

from services.worker.builtins import register_builtins
from services.worker.notes import JobNotes
from services.worker.registry import JobContext, Registry, Task, import_handler_modules
from shared import logs, metrics
from shared.config import Settings
from shared.db import jobs as jobs_db
from shared.db import workers
from shared.db.database import Database
from shared.db.pool import RETRY_FIRST_SECS, RETRY_MAX_SECS, is_database_error, is_unavailable, until_answered
from shared.domain.caps import truncated_error
from shared.domain.errors import DomainError
from shared.domain.jobs import DeadLetterReason, JobStatus, Lease
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
        # Every job this process holds, from its claim until its outcome is written (or it is
        # given back): what a cancellation through the API and the shutdown look up.
        self._claimed: dict[uuid.UUID, _Claimed] = {}
        self._slow: dict[asyncio.Task[None], _Claimed] = {}  # jobs run through _run_slow
        self._waiting: set[asyncio.Task[Any]] = set()  # slow ones waiting for a task slot
        self._slots = {t.name: Slots(t.concurrency) for t in registry if t.concurrency}
        # Per queue, at most --workers handlers run at once; up to as many more jobs are held,
        # claimed ahead so the next claim's commit overlaps the running handlers.
        self._queues = {q: _QueueRun(q, settings.workers) for q in settings.worker_queues}
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None
        self._durations: dict[str, Any] = {}
        self._writes = 0  # outcome writes not yet answered
        self._writes_done = asyncio.Event()
        self._writes_abandoned = False  # the shutdown stopped waiting for them: no more retries
        self._deadlines = _Deadlines(self._expire)
        self._renewals: set[asyncio.Task[bool]] = set()  # buffered jobs' lease renewals
        self._unwatch: Callable[[], None] | None = None
        self._stopping = False
        self._notes = JobNotes(db, settings.job_log_max_bytes)  # the handlers' progress and log lines

    async def start(self) -> None:
        s = self.settings
        if any(not t.is_async for t in self.registry):
            self._threads = concurrent.futures.ThreadPoolExecutor(
                max_workers=s.workers * len(s.worker_queues), thread_name_prefix="queueflow-task"
            )
        await self._register_tasks()
        self._notes.start()
        self._unwatch = self.db.hub.watch_all_jobs(self._on_job_event)
        self._loops = [
            asyncio.create_task(self._queue_loop(q), name=f"queueflow-worker-{q.name}")
            for q in self._queues.values()
        ]
        self._loops.append(asyncio.create_task(self._task_heartbeat(), name="queueflow-task-heartbeat"))

    def _duration(self, task: str) -> Any:
        """The handler-duration histogram of `task` (its labelled child, looked up once, observed
        in bulk at the end of each event-loop turn)."""
        child = self._durations.get(task)
        if child is None:
            child = self._durations[task] = metrics.TurnBatch(metrics.HANDLER_DURATION.labels(task))
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
        """Stop leasing; give back the jobs waiting for a run or task slot; drain running handlers
        for up to the grace period, then cancel and give back the rest."""
        self._stopping = True
        for t in self._loops:
            t.cancel()
        for t in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for renewing in list(self._renewals):
            renewing.cancel()
        give_back: list[_Claimed] = []
        for q in self._queues.values():
            if q.keepalive is not None:
                q.keepalive.cancel()
            give_back.extend(q.ready)
            q.ready.clear()
        for t in self._waiting:
            t.cancel()
            give_back.append(self._slow[t])
        running: dict[asyncio.Future[Any], _Claimed] = {
            t: item for t, item in self._slow.items() if t not in self._waiting
        }
        for item in self._claimed.values():
            if item.handler is not None and item.slow is False and not item.handler.done():
                running[item.handler] = item
        if running:
            log.info("worker_draining", jobs=len(running))
            _, pending = await asyncio.wait(running, timeout=self.settings.shutdown_grace_secs)
            for fut in pending:
                item = running[fut]
                if not item.slow:
                    item.given_back = True  # its done-callback reports nothing
                    item.ctx.abandon()
                fut.cancel()  # a slow job's task abandons its handler, then cancels it
                give_back.append(item)
        if give_back:
            ending = [t for t, item in self._slow.items() if item in give_back]
            if ending:
                await asyncio.wait(ending, timeout=2)
            released = 0
            with contextlib.suppress(Exception):
                released = await jobs_db.release(
                    self.db.pool, [(item.job.id, item.token) for item in give_back]
                )
            log.warning("worker_released_jobs", jobs=len(give_back), released=released)
        # Outcomes of the handlers that finished are being written: let them land.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(5.0, self.settings.shutdown_grace_secs)):
                while self._writes:
                    self._writes_done.clear()
                    await self._writes_done.wait()
        self._writes_abandoned = True
        with contextlib.suppress(Exception):
            await self._notes.stop()
        if self._unwatch is not None:
            self._unwatch()
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

    # -- claiming ---------------------------------------------------------------------------------

    async def _queue_loop(self, q: _QueueRun) -> None:
        s = self.settings
        loop = asyncio.get_running_loop()
        while not self._stopping and not self.lifecycle.draining:
            free = q.budget.free
            if free < q.budget.worth_claiming:
                await q.budget.wait()
                continue
            # The pace is sampled claim to claim (not at every job counted out, whose intervals
            # are too short to say anything), and sizes this claim.
            q.budget.pace(loop.time())
            free = min(q.budget.free, q.budget.worth_claiming)
            if free <= 0:
                continue
            try:
                leases = await lease_jobs(
                    self.db,
                    self.lifecycle,
                    q.name,
                    free,
                    s.lease_secs,
                    s.worker_poll_secs,
                    s.worker_poll_secs,
                    timeout_grace=s.lease_grace_secs,
                    worker_id=self.process_id,  # the attempts' worker (docs/visibility.md)
                )
            except Exception as err:
                # A claim that failed must never end the queue's loop: an unreachable database is
                # warned about, anything else logged with its traceback; both are tried again.
                log.warning("claim_failed", queue=q.name, error=str(err), exc_info=not is_database_error(err))
                await asyncio.sleep(1.0)
                continue
            claimed_at = loop.time()
            for lease in leases:
                task = self.registry.get(lease.job.task_name)
                item = _Claimed(lease, task, claimed_at, q.budget, s.lease_grace_secs, self._notes)
                q.budget.take()
                self._claimed[lease.job.id] = item
                q.ready.append(item)
            # Started in the loop's next turn: by then this loop has sent the next claim (when the
            # budget allows one), so the database claims while these jobs are being started. (At
            # a fast pace starting a claim's jobs costs about as long as the claim; one after the
            # other, each of the two waited for the other.)
            loop.call_soon(self._start_claimed, q)

    def _start_claimed(self, q: _QueueRun) -> None:
        self._pump(q)
        if q.ready and not self._stopping:
            self._arm_keepalive(q)

    def _arm_keepalive(self, q: _QueueRun) -> None:
        """Time the next renewal of buffered jobs for the one due first: sooner than the armed
        one, should a job with a shorter lease have joined the buffer."""
        due = min(item.renewed_at + item.keepalive for item in q.ready)
        if q.keepalive is not None:
            if q.keepalive.when() <= due:
                return
            q.keepalive.cancel()
        q.keepalive = asyncio.get_running_loop().call_at(due, self._keep_buffered_alive, q)

    def _keep_buffered_alive(self, q: _QueueRun) -> None:
        """Jobs claimed ahead that have waited a third of their lease for a run slot get a fresh
        lease (one statement each: only a queue whose handlers are slow gets here); a job no longer
        ours (cancelled or reclaimed meanwhile) is dropped from the buffer when its turn comes."""
        q.keepalive = None
        if self._stopping:
            return
        now = asyncio.get_running_loop().time()
        for item in q.ready:
            if item.renewed_at + item.keepalive <= now:
                item.renewed_at = now
                renewing = asyncio.create_task(self._extend_lease(item.job.id, item.token, item.timeout))
                self._renewals.add(renewing)
                renewing.add_done_callback(self._renewals.discard)
                renewing.add_done_callback(functools.partial(_renewed, item))
        if q.ready:
            self._arm_keepalive(q)

    def _pump(self, q: _QueueRun) -> None:
        """Start buffered jobs while the queue has free run slots (none once stopping: the
        shutdown gives them back)."""
        if self._stopping:
            return
        while q.ready and q.running < q.workers:
            item = q.ready.popleft()
            if item.ctx.is_cancelled:  # cancelled through the API while it waited: never started
                log.info("job_handler_cancelled", started=False, **item.fields())
                self._done(item)
                continue
            q.running += 1
            task = item.task
            if (
                task is not None
                and task.is_async
                and task.concurrency is None
                and not self._needs_fresh_lease(item)
            ):
                finished = self._start_fast(q, item)
                if finished is not None:  # it never suspended: reported here, no task was made
                    item.handled()
                    q.running -= 1  # (not _release_run_slot: this loop goes on with the next)
                    self._report(item, finished)
            else:
                item.slow = True
                run = asyncio.create_task(self._run_slow(q, item))
                self._slow[run] = item
                run.add_done_callback(self._slow_ended)

    def _release_run_slot(self, q: _QueueRun) -> None:
        q.running -= 1
        if not self._stopping:
            self._pump(q)

    def _needs_fresh_lease(self, item: _Claimed) -> bool:
        """The claim leased the job for its own timeout plus the grace; a longer task timeout, or
        a wait for a run or task slot that ate into the grace, needs a fresh lease before the
        handler starts. A short wait (a job claimed ahead) needs none: the grace covers it, and a
        heartbeat per job would cost a statement per job."""
        task = item.task
        if (
            task is not None
            and task.timeout_secs is not None
            and task.timeout_secs > item.job.config.timeout_secs
        ):
            return True
        loop = asyncio.get_running_loop()
        return loop.time() - item.renewed_at > self.settings.lease_grace_secs / 2

    def _on_job_event(self, job_id: str, status: str) -> None:
        """A job was cancelled through the API: if it is ours, its handler is cancelled (an async
        one outright, a sync one told through ctx.is_cancelled) and nothing is reported."""
        if status != "cancelled":
            return
        try:
            item = self._claimed.get(uuid.UUID(job_id))
        except ValueError:
            return
        if item is not None:
            item.ctx.abandon()
            if item.handler is not None:
                item.handler.cancel()

    # -- the common path: an async handler without a task-level limit -------------------------------
    # No task per job beyond the handler's own, no per-job future for the completion: a finished
    # handler's done-callback frees its run slot, starts the next buffered job and queues the
    # outcome for the group commit.

    def _start_fast(self, q: _QueueRun, item: _Claimed) -> _Finished | None:
        """Run the handler's first step at once, in a context of its own (as Python 3.12's eager
        tasks do): a handler that returns without awaiting anything pending (a no-op, a cache hit,
        a validation failure) is finished here, with no task, timer or done-callback, and its
        outcome is returned. One that suspends goes on as a task from where it stopped."""
        assert item.task is not None
        loop = asyncio.get_running_loop()
        item.started = now = loop.time()
        context = contextvars.copy_context()
        coro = _call_bound(item.task, item.ctx)
        try:
            waiting_on = context.run(coro.send, None)
        except StopIteration as returned:
            self._duration(item.task.name).observe(loop.time() - now)
            return _Finished(result=returned.value)
        except (Exception, asyncio.CancelledError) as raised:
            self._duration(item.task.name).observe(loop.time() - now)
            return _Finished(error=_without_catcher(raised))
        handler = loop.create_task(_resumed(coro, waiting_on), context=context)
        item.handler = handler
        self._deadlines.add(item, now + item.timeout)
        handler.add_done_callback(functools.partial(self._fast_done, q, item))
        return None

    def _fast_done(self, q: _QueueRun, item: _Claimed, handler: asyncio.Future[Any]) -> None:
        assert item.task is not None
        self._deadlines.discard(item)
        self._duration(item.task.name).observe(asyncio.get_running_loop().time() - item.started)
        item.handled()
        self._release_run_slot(q)
        if item.given_back:  # the shutdown took it back; stop() releases the lease
            self._done(item)
            return
        self._report(item, handler)

    @staticmethod
    def _expire(item: _Claimed) -> None:
        item.expired = True
        item.ctx.abandon()
        if item.handler is not None:
            item.handler.cancel()

    # -- outcomes -----------------------------------------------------------------------------------

    def _report(self, item: _Claimed, handler: asyncio.Future[Any] | _Finished) -> None:
        """Write the outcome of a finished handler (or nothing, when the server owns it). What the
        handler reported (progress, log lines) and is not yet written goes first."""
        if self._notes.has_notes(item.job.id):
            self._writes += 1
            settling = asyncio.create_task(self._notes.settle(item.job.id))

            def settled(_: asyncio.Task[None]) -> None:
                self._report(item, handler)
                self._write_answered()

            settling.add_done_callback(settled)
            return
        if item.expired:
            self._fail_later(item, f"job exceeded its timeout of {item.timeout}s", True)
            return
        if item.ctx.cancelled.is_set():
            # Cancelled through the API: whatever the handler did last, the server owns the outcome.
            log.info("job_handler_cancelled", started=True, **item.fields())
            self._done(item)
            return
        if handler.cancelled():
            self._fail_later(item, "handler was cancelled", True)
            return
        err = handler.exception()
        if err is not None:
            retryable = getattr(err, "retryable", True) is not False
            self._fail_later(item, truncated_error(str(err) or type(err).__name__), retryable)
            return
        result = handler.result()
        if result is not None and not isinstance(result, dict):
            self._fail_later(item, f"handler returned {type(result).__name__}, not an object", False)
            return
        encoded = _stored_result(result or {})
        if isinstance(encoded, str):
            self._fail_later(item, f"handler returned a result that cannot be stored: {encoded}", False)
            return
        self._writes += 1
        item.result = encoded
        item.answered = functools.partial(self._completion_answered, item)
        self.db.completer.submit_nowait((item.job.id, item.token, encoded), item.answered)

    def _completion_answered(self, item: _Claimed, answer: BaseException | None) -> None:
        if isinstance(answer, BaseException):
            if is_unavailable(answer) and not self._writes_abandoned:
                # Written again until it lands or answers, as every outcome is (see _written).
                delay = item.retry_in
                item.retry_in = min(delay * 2, RETRY_MAX_SECS)
                log.warning(
                    "job_report_retrying",
                    write="completion",
                    error=str(answer),
                    retry_in_secs=delay,
                    **item.fields(),
                )
                asyncio.get_running_loop().call_later(delay, self._resubmit, item)
                return
            if isinstance(answer, DomainError):  # cancelled or reclaimed meanwhile: the server owns it
                log.info("job_completion_refused", reason=answer.message, **item.fields())
            else:
                log.error("job_report_failed", error=repr(answer), **item.fields())
        self._write_answered()
        self._done(item)

    def _resubmit(self, item: _Claimed) -> None:
        assert item.result is not None and item.answered is not None
        self.db.completer.submit_nowait((item.job.id, item.token, item.result), item.answered)

    def _write_answered(self) -> None:
        self._writes -= 1
        if self._writes == 0:
            self._writes_done.set()

    def _fail_later(self, item: _Claimed, error: str, retryable: bool, reason: str | None = None) -> None:
        self._writes += 1
        failing = asyncio.create_task(self._fail(item, error, retryable, reason))

        def written(_: asyncio.Task[None]) -> None:
            self._write_answered()
            self._done(item)

        failing.add_done_callback(written)

    def _done(self, item: _Claimed) -> None:
        """The job is no longer this process's: outcome written, refused, or owned by the server."""
        self._claimed.pop(item.job.id, None)
        # Its completion callback holds the item: dropped, so the item and its context are freed
        # at once instead of waiting, a cycle, for the garbage collector.
        item.answered = None
        item.ended()

    async def _fail(self, item: _Claimed, error: str, retryable: bool, reason: str | None = None) -> None:
        logs.bind(**item.fields())
        job_id, token = item.job.id, item.token
        try:
            outcome: str = await _written(
                "failure",
                lambda: jobs_db.fail(
                    self.db.pool, job_id, token, error, retryable, reason, tracer=self.db.tracer
                ),
            )
        except DomainError as err:
            outcome = err.message
        log.info("job_failed", outcome=outcome, retryable=retryable)

    # -- everything else: sync handlers, task-level limits, fresh leases, unknown tasks ---------------

    def _slow_ended(self, run: asyncio.Task[None]) -> None:
        item = self._slow.pop(run)
        self._waiting.discard(run)
        if not item.reporting:
            self._done(item)
        if not run.cancelled() and run.exception() is not None:
            log.error("job_report_failed", error=repr(run.exception()), **item.fields())

    async def _run_slow(self, q: _QueueRun, item: _Claimed) -> None:
        job, token, task, ctx = item.job, item.token, item.task, item.ctx
        # Every log line of this job (the runtime's and its handler's) names it.
        logs.bind(**item.fields())
        # What this job holds (its run slot, then maybe a task slot), given back when it ends.
        held: list[Callable[[], None]] = [lambda: self._release_run_slot(q)]

        def release_all() -> None:
            while held:
                held.pop()()

        release: Callable[[], None] | None = release_all
        try:
            if task is None:
                release_all()
                item.handled()
                item.reporting = True
                self._fail_later(
                    item,
                    f"no handler registered for task '{job.task_name}'",
                    False,
                    DeadLetterReason.HANDLER_NOT_FOUND,
                )
                log.warning("job_dead_lettered", reason=DeadLetterReason.HANDLER_NOT_FOUND)
                return
            extend = self._needs_fresh_lease(item)
            slots = self._slots.get(task.name)
            if slots is not None:
                waited = slots.locked()
                if not await self._take_slot(slots, item):
                    log.info("job_handler_cancelled", started=False)
                    return
                held.append(slots.release)
                extend = extend or (waited and self._needs_fresh_lease(item))
            if extend and not await self._extend_lease(job.id, token, item.timeout):
                log.info("job_handler_cancelled", started=False)
                return
            handler = self._start(task, ctx, release_all)
            release = None  # the handler owns the slots now and gives them back when it finishes
            item.handler = handler
            handler.add_done_callback(_observed)
            await self._await_handler(item, handler)
        finally:
            item.handled()
            if release is not None:
                release()

    async def _take_slot(self, slots: Slots, item: _Claimed) -> bool:
        """Wait for a free slot of a concurrency-limited task while keeping the job's lease alive.
        False when the job was cancelled or its lease lost meanwhile (no slot is then held)."""
        if not slots.locked():
            await slots.acquire()  # free: returns without suspending
            return True
        current = asyncio.current_task()
        assert current is not None
        self._waiting.add(current)
        ctx = item.ctx
        try:
            while True:
                try:
                    async with asyncio.timeout(item.keepalive):
                        await slots.acquire()
                except TimeoutError:
                    if ctx.cancelled.is_set() or not await self._extend_lease(
                        item.job.id, item.token, item.timeout
                    ):
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

    def _start(self, task: Task, ctx: JobContext, release: Callable[[], None]) -> asyncio.Future[Any]:
        """Start the handler. `release` runs when it has really finished: for a sync handler that is
        when its thread returns, even if the job was given up earlier, so a task's concurrency
        counts every handler still running."""
        if task.is_async:
            running: asyncio.Future[Any] = asyncio.ensure_future(_call_bound(task, ctx))
            running.add_done_callback(lambda _: release())
            return running
        assert self._threads is not None
        loop = asyncio.get_running_loop()
        thread_job = self._threads.submit(contextvars.copy_context().run, task.handler, ctx)

        def released(_: concurrent.futures.Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nothing left to release
                loop.call_soon_threadsafe(release)

        thread_job.add_done_callback(released)
        return asyncio.wrap_future(thread_job, loop=loop)

    async def _await_handler(self, item: _Claimed, handler: asyncio.Future[Any]) -> None:
        assert item.task is not None
        loop = asyncio.get_running_loop()
        item.started = loop.time()
        # One timer per job, not asyncio.wait's futures and callbacks.
        timer = loop.call_later(item.timeout, self._expire, item)
        current = asyncio.current_task()
        try:
            await asyncio.shield(handler)  # a shutdown cancels this task: abandon first, then the handler
        except asyncio.CancelledError:
            if current is not None and current.cancelling():  # shutdown: stop() gives the lease back
                item.ctx.abandon()
                handler.cancel()
                raise
            # the handler itself ended cancelled (its time-out, the API's cancel, or its own doing)
        except Exception as raised:  # read below, from the handler
            _without_catcher(raised)  # (the handler's future holds it: no cycle through this frame)
        finally:
            timer.cancel()
            self._duration(item.task.name).observe(loop.time() - item.started)
            item.handled()  # what is left is reporting: the queue loop may claim the next job
        item.reporting = True
        self._report(item, handler)


class _Deadlines:
    """The running handlers' time-outs, at DEADLINE_TICK resolution: jobs due in the same tick share
    a bucket, and one timer is armed for the earliest bucket (a timer per job cost a tenth of the
    in-process drain's CPU). A handler that finishes leaves its bucket at once."""

    def __init__(self, expire: Callable[[_Claimed], None]) -> None:
        self._expire = expire
        self._buckets: dict[int, set[_Claimed]] = {}
        self._ticks: list[int] = []  # a heap of bucket ticks (some stale: their bucket emptied)
        self._timer: asyncio.TimerHandle | None = None
        self._armed = 0

    def add(self, item: _Claimed, at: float) -> None:
        tick = math.ceil(at / DEADLINE_TICK)
        item.deadline = tick
        bucket = self._buckets.get(tick)
        if bucket is None:
            bucket = self._buckets[tick] = set()
            heapq.heappush(self._ticks, tick)
            if self._timer is None or tick < self._armed:
                self._arm(tick)
        bucket.add(item)

    def discard(self, item: _Claimed) -> None:
        bucket = self._buckets.get(item.deadline)
        if bucket is not None:
            bucket.discard(item)
            if not bucket:
                del self._buckets[item.deadline]

    def _arm(self, tick: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = tick
        self._timer = asyncio.get_running_loop().call_at(tick * DEADLINE_TICK, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time()
        while self._ticks and self._ticks[0] * DEADLINE_TICK <= now:
            for item in self._buckets.pop(heapq.heappop(self._ticks), ()):
                self._expire(item)
        while self._ticks and self._ticks[0] not in self._buckets:
            heapq.heappop(self._ticks)  # stale: every job of that tick finished
        if self._ticks:
            self._arm(self._ticks[0])


def _without_catcher(err: BaseException) -> BaseException:
    """`err` with the first entry of its traceback, the frame that caught it, dropped (the
    handler's own frames stay). That frame's locals, or its caller's, hold what holds `err` (the
    outcome made of it, the handler's future): a reference cycle per failed job, which only the
    garbage collector would free."""
    tb = err.__traceback__
    return err.with_traceback(tb.tb_next if tb is not None else None)


class _Finished:
    """The outcome of a handler that finished in its first step, read as a done future's is."""

    __slots__ = ("_error", "_result")

    def __init__(self, result: Any = None, error: BaseException | None = None) -> None:
        self._result = result
        self._error = error

    def cancelled(self) -> bool:
        return isinstance(self._error, asyncio.CancelledError)

    def exception(self) -> BaseException | None:
        return self._error

    def result(self) -> Any:
        return self._result


@types.coroutine
def _resumed(coro: Coroutine[Any, Any, Any], waiting_on: Any) -> Generator[Any, Any, Any]:
    """Carry on, as a task's coroutine, a coroutine whose first step already ran and suspended on
    `waiting_on`: hand that to the task, then relay what the task sends or throws (its wake-ups and
    its cancellation) until the coroutine returns or raises."""
    while True:
        try:
            sent = yield waiting_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as thrown:  # the task's cancellation, for the handler to see
            try:
                waiting_on = coro.throw(thrown)
            except StopIteration as returned:
                return returned.value
            continue
        try:
            waiting_on = coro.send(sent)
        except StopIteration as returned:
            return returned.value


class _QueueRun:
    """One queue's in-process state: its claim budget, its claimed jobs waiting for a run slot,
    and how many handlers run."""

    def __init__(self, name: str, workers: int) -> None:
        self.name = name
        self.workers = workers
        # Claimed ahead: jobs waiting behind the running ones, and finished ones whose outcome is
        # being written, within the budget's caps (see _Budget).
        self.budget = _Budget(workers)
        self.ready: collections.deque[_Claimed] = collections.deque()
        self.running = 0
        self.keepalive: asyncio.TimerHandle | None = None  # renews the buffered jobs' leases


class _Claimed:
    """One job this process leased, from its claim until its outcome is written."""

    __slots__ = (
        "answered",
        "budget",
        "claimed_at",
        "ctx",
        "deadline",
        "expired",
        "finished",
        "given_back",
        "handler",
        "job",
        "keepalive",
        "renewed_at",
        "reporting",
        "result",
        "retry_in",
        "slow",
        "started",
        "task",
        "timeout",
        "token",
    )

    def __init__(
        self,
        lease: Lease,
        task: Task | None,
        claimed_at: float,
        budget: _Budget,
        grace: int,
        notes: JobNotes,
    ) -> None:
        self.job = lease.job
        self.token = lease.token
        self.task = task
        self.ctx = JobContext(lease.job, lease.token, notes)
        self.claimed_at = claimed_at
        self.renewed_at = claimed_at  # when its lease was last set: by the claim or a renewal
        self.timeout = max(
            1, (task.timeout_secs if task is not None else None) or lease.job.config.timeout_secs
        )
        # While it waits for a run slot, its lease is renewed every third of (timeout + grace).
        self.keepalive = max(1.0, min(30.0, (self.timeout + grace) / 3))
        self.budget = budget
        self.finished = False  # its handler finished (or it never started)
        self.handler: asyncio.Future[Any] | None = None
        self.started = 0.0
        self.expired = False
        self.deadline = 0  # its time-out's tick (_Deadlines)
        self.given_back = False
        self.slow = False
        self.reporting = False
        self.result: msgspec.Raw | None = None
        self.retry_in = RETRY_FIRST_SECS
        self.answered: Callable[[BaseException | None], None] | None = None  # set with the result

    def handled(self) -> None:
        """Its handler finished (or it will never start): idempotent."""
        if not self.finished:
            self.finished = True
            self.budget.handled()

    def ended(self) -> None:
        """Its outcome is written, or it is no longer ours: once."""
        self.handled()
        self.budget.ended()

    def fields(self) -> dict[str, str]:
        """The job's log context."""
        job = self.job
        return {"job_id": str(job.id), "task": job.task_name, "queue": job.queue_name}


# Jobs a queue loop may hold per --workers, counting finished ones whose outcome is being written,
# at the slowest pace; at a fast one, about AHEAD_SECS of work, up to MAX_AHEAD (see _Budget).
HELD_PER_WORKER = 8
AHEAD_SECS = 0.05
MAX_AHEAD = 1000
DEADLINE_TICK = 0.1  # seconds: the resolution of in-process handler time-outs


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
    its handler finishes, and as *held* until its outcome is written (or it is no longer ours).
    Unfinished jobs are capped at `ahead` (running plus claimed ahead), held ones at `held`: a
    finished job stops holding a run slot, so the next claim overlaps the previous jobs'
    completions, but only so far, or a database slower to write outcomes than to hand out jobs
    would let claims run away from the completions (each claimed job a lease ticking).

    Both caps follow the queue's pace (`pace`, before each claim): at least 2 x --workers and
    HELD_PER_WORKER x --workers, and at a fast pace about AHEAD_SECS of work, up to MAX_AHEAD. So
    slow jobs are claimed a few at a time (a job is not held back from other workers for long),
    and a stream of short ones in batches large enough to pay each statement's fixed cost. The
    pace counts written outcomes, so stuck completions shrink the caps rather than grow them."""

    def __init__(self, workers: int) -> None:
        self.least = 2 * workers
        self.least_held = max(HELD_PER_WORKER * workers, self.least)
        self.ahead = self.least
        self.held = self.least_held
        self._unfinished = 0
        self._held = 0
        self._ended = 0  # outcomes written, ever
        self._paced: tuple[float, int] | None = None
        self._rate = 0.0
        self._freed = asyncio.Event()

    @property
    def free(self) -> int:
        return min(self.ahead - self._unfinished, self.held - self._held)

    @property
    def worth_claiming(self) -> int:
        """The fewest free places worth a claim, and the most one claim takes: half the cap (a
        claim per job is what a slow queue needs, a batch per claim what a fast one does). Half,
        so that the next claim is already out while the last one's jobs are being started."""
        return max(1, self.ahead // 2)

    def pace(self, now: float) -> None:
        if self._paced is not None:
            since, ended = self._paced
            if now > since:
                rate = (self._ended - ended) / (now - since)
                self._rate = (self._rate + rate) / 2
        self._paced = (now, self._ended)
        self.ahead = min(MAX_AHEAD, max(self.least, int(self._rate * AHEAD_SECS)))
        self.held = max(self.least_held, 2 * self.ahead)

    async def wait(self) -> None:
        """Until at least one job has been counted out."""
        self._freed.clear()
        await self._freed.wait()

    def take(self) -> None:
        self._unfinished += 1
        self._held += 1

    def handled(self) -> None:
        self._unfinished -= 1
        self._freed.set()

    def ended(self) -> None:
        self._held -= 1
        self._ended += 1
        self._freed.set()


async def _written(what: str, write: Callable[[], Awaitable[T]]) -> T:
    """`write()`, tried again while the database is unreachable until it lands or answers.
    Outcome writes are idempotent under the lease token: a retry of one that committed before the
    connection dropped is answered as a replay or refused as stale, never applied twice. Dropping
    it instead would leave the job to its lease's expiry (timeout + grace) and spend a retry. A
    shutdown cancels the wait."""

    def retrying(err: BaseException, delay: float) -> None:
        log.warning("job_report_retrying", write=what, error=str(err), retry_in_secs=delay)

    return await until_answered(write, retrying)


def _renewed(item: _Claimed, renewing: asyncio.Task[bool]) -> None:
    """A buffered job's lease renewal answered: a job no longer ours is skipped when its turn comes."""
    if renewing.cancelled() or renewing.exception() is not None or not renewing.result():
        item.ctx.abandon()


def _observed(handler: asyncio.Future[Any]) -> None:
    """Mark the outcome seen: a handler that raises after it was timed out or cancelled has no
    one left to report to, and asyncio would log "exception was never retrieved"."""
    if not handler.cancelled():
        handler.exception()


# cast()'s first argument is evaluated at every call: a subscripted Callable built per job.
_AsyncHandler = Callable[[JobContext], Awaitable[Any]]


async def _call_bound(task: Task, ctx: JobContext) -> Any:
    """An async handler, with the job's log context bound in its own task."""
    job = ctx.job
    logs.bind(job_id=str(job.id), task=job.task_name, queue=job.queue_name)
    return await cast(_AsyncHandler, task.handler)(ctx)  # is_async said so


def _stored_result(result: dict[str, Any]) -> msgspec.Raw | str:
    """`result` encoded for its jsonb column (passed through as is), or why it cannot be stored.
    Checked before the group commit, where one bad value would fail every completion of its batch."""
    try:
        encoded = _encode_result(result)
    except (TypeError, ValueError, OverflowError) as err:
        return str(err)
    if b"\\u0000" in encoded:
        return "a string contains a NUL character"
    return msgspec.Raw(encoded)


def build_registry(handler_modules: tuple[str, ...] = ()) -> Registry:
    """The built-ins, then every task of the --handlers modules (ConfigError naming a bad one)."""
    registry = Registry()
    register_builtins(registry)
    import_handler_modules(registry, handler_modules)
    return registry


def default_registry() -> Registry:
    return build_registry()
