"""Group commit: concurrent writes of one kind share a statement (and a commit).

While one flush runs, new writes queue up and go out together in the next, so batches grow with
load and add no delay when idle. Each caller still gets its own answer (or its own domain error,
such as a lost lease); should a grouped write fail, its items are written one by one, so one bad
item fails only its own caller, unless the database is unreachable: then every caller gets that
error at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import uuid
from collections.abc import Callable
from typing import Generic, TypeVar, cast

from shared.db import audit
from shared.db import jobs as jobs_db
from shared.db.pool import Connection, Pool, is_unavailable
from shared.domain.audit import AuditRecord
from shared.domain.jobs import JobStatus, NewJob, Object
from shared.tracing import Tracer

In = TypeVar("In")
Out = TypeVar("Out")
# Who hears a write's answer: an awaiting caller's future, or a callback (no task or future per
# item: the in-process runtime's completions).
Sink = asyncio.Future[Out] | Callable[[Out | BaseException], None]


class GroupCommit(Generic[In, Out]):
    """Subclasses say how to write many items at once (`_write_many`, answers in input order)."""

    name = "group-commit"

    def __init__(self, pool: Pool, max_batch: int = 500) -> None:
        self.pool = pool
        self.max_batch = max_batch
        self._pending: list[tuple[In, Sink[Out]]] = []
        self._flushing: list[tuple[In, Sink[Out]]] = []
        self._idle = asyncio.Event()
        self._idle.set()
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"queueflow-{self.name}")

    async def _write_many(self, items: list[In]) -> list[Out | BaseException]:
        """One answer per item, in order: its result, or the exception its caller gets."""
        raise NotImplementedError

    async def submit(self, item: In) -> Out:
        fut: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._pending.append((item, fut))
        self._wakeup.set()
        return await fut

    async def submit_all(self, items: list[In]) -> list[Out | BaseException]:
        """Many items of one caller, each answered on its own (its result or its exception, in
        order), without a future or a task per item."""
        if not items:
            return []
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        answers: list[Out | BaseException] = [None] * len(items)  # type: ignore[list-item]
        left = len(items)

        def answered(index: int, answer: Out | BaseException) -> None:
            nonlocal left
            answers[index] = answer
            left -= 1
            if left == 0 and not done.done():
                done.set_result(None)

        for index, item in enumerate(items):
            self._pending.append((item, functools.partial(answered, index)))
        self._wakeup.set()
        await done
        return answers

    def submit_nowait(self, item: In, answered: Callable[[Out | BaseException], None]) -> None:
        """Queue `item`; `answered` is called with its answer (or the exception a caller of
        `submit` would get) once its group is written."""
        self._pending.append((item, answered))
        self._wakeup.set()

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            self._idle.clear()
            while self._pending:
                # (no local name for the batch: this coroutine would hold the last one, and every
                # caller's callback in it, until the next flush)
                self._flushing, self._pending = (
                    self._pending[: self.max_batch],
                    self._pending[self.max_batch :],
                )
                await self._flush(self._flushing)
                self._flushing = []
            self._idle.set()

    async def _flush(self, batch: list[tuple[In, Sink[Out]]]) -> None:
        try:
            answers = await self._write_many([item for item, _ in batch])
        except Exception as err:
            # One bad item fails only its own caller: write them one by one. An unreachable
            # database fails them all alike, at once (not one connection attempt per item).
            if len(batch) > 1 and not is_unavailable(err):
                for one in batch:
                    await self._flush([one])
            else:
                for _, sink in batch:
                    _answer(sink, err)
            return
        for (_, sink), answer in zip(batch, answers, strict=True):
            _answer(sink, answer)

    async def close(self, timeout: float = 5.0) -> None:
        """Let queued writes finish (up to `timeout` seconds) before the pool goes away; any caller
        still waiting after that gets an error rather than no answer at all."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self._pending or not self._idle.is_set():
                    await self._idle.wait()
                    await asyncio.sleep(0)  # a write queued by a woken caller starts its flush
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        for _, sink in [*self._flushing, *self._pending]:
            _answer(sink, ConnectionError(f"{self.name}: shut down before the write was confirmed"))


def _answer(sink: Sink[Out], answer: Out | BaseException) -> None:
    if not isinstance(sink, asyncio.Future):
        sink(answer)
    elif sink.done():
        return
    elif isinstance(answer, BaseException):
        sink.set_exception(answer)
    else:
        sink.set_result(answer)


class CompletionBatcher(GroupCommit[jobs_db.Completion, None]):
    """Completions: one UPDATE ... FROM unnest for every completion in flight."""

    name = "completer"

    def __init__(self, pool: Pool, tracer: Tracer | None = None, max_batch: int = 500) -> None:
        super().__init__(pool, max_batch)
        self.tracer = tracer

    async def _write_many(self, items: list[jobs_db.Completion]) -> list[BaseException | None]:
        return list(await jobs_db.complete_many(self.pool, items, self.tracer))

    async def complete(self, job_id: uuid.UUID, token: uuid.UUID | None, result: Object) -> None:
        """Complete one job; raises NotFound or Conflict as the protocol says (a replay by the
        holder's token is a success)."""
        await self.submit((job_id, token, result))


class HeartbeatBatcher(GroupCommit[jobs_db.Beat, JobStatus]):
    """Heartbeats that report no progress: one UPDATE ... FROM unnest for every one in flight."""

    name = "heartbeater"

    async def _write_many(self, items: list[jobs_db.Beat]) -> list[JobStatus | BaseException]:
        return list(await jobs_db.heartbeat_many(self.pool, items, jobs_db.HEARTBEAT_LEASE_LOST))

    async def beat(self, job_id: uuid.UUID, token: uuid.UUID | None, extend_secs: int) -> JobStatus:
        """Extend one lease: `running`, or the status of a job its holder must stop; raises
        NotFound or Conflict as the protocol says (jobs.heartbeat)."""
        return await self.submit((job_id, token, extend_secs))


class FailureBatcher(GroupCommit[jobs_db.Failure, JobStatus]):
    """Failures reported over the protocol: every one in flight in one transaction (one commit)."""

    name = "failer"

    def __init__(self, pool: Pool, tracer: Tracer | None = None, max_batch: int = 500) -> None:
        super().__init__(pool, max_batch)
        self.tracer = tracer

    async def _write_many(self, items: list[jobs_db.Failure]) -> list[JobStatus | BaseException]:
        async with self.pool.acquire() as conn:
            return list(await jobs_db.fail_many(conn, items, self.tracer))

    async def fail(
        self, job_id: uuid.UUID, token: uuid.UUID | None, error: str, retryable: bool
    ) -> JobStatus:
        """Fail one job through the retry policy: `retrying` or `failed`; raises NotFound or
        Conflict as the protocol says (jobs.fail)."""
        return await self.submit((job_id, token, error, retryable))


# A single enqueue: its tenant, the job, a lease call's terms to write it leased on (or None), and
# the audit scope of the request that enqueues it (or None): its entry is written with the job.
Enqueue = tuple[str | None, NewJob, jobs_db.Handoff | None, audit.Scope | None]


class InsertBatcher(GroupCommit[Enqueue, jobs_db.Inserted]):
    """Single enqueues: one transaction (one insert statement per tenant, one commit, one wake-up
    per queue) for every POST /jobs in flight; a single tenant's group is one statement. A job
    may come with a `Handoff`: it is then written leased on its terms (jobs.insert_handed_off).
    The audit entries of the requests that enqueue (docs/access.md) are written with their jobs:
    by the insert statement itself when the group is one statement whose jobs each insert a row of
    their own, else in the group's transaction, one pipelined round trip, each naming its job."""

    name = "inserter"

    async def _write_many(self, items: list[Enqueue]) -> list[jobs_db.Inserted | BaseException]:
        # One statement per tenant, and a second for its jobs handed off to a lease call (those
        # are never kept out by a key: jobs.insert_handed_off).
        groups: dict[tuple[str | None, bool], list[int]] = {}
        for index, (tenant, _, handoff, _) in enumerate(items):
            groups.setdefault((tenant, handoff is not None), []).append(index)
        scopes = {index: item[3] for index, item in enumerate(items) if item[3] is not None}
        answers: list[jobs_db.Inserted | BaseException]
        if len(groups) == 1:
            [((tenant, handed_off), indexes)] = groups.items()
            if not scopes or handed_off or jobs_db.inserts_every_row([item[1] for item in items]):
                # One statement, atomic on its own (no BEGIN and COMMIT round trips around it),
                # that writes the requests' entries too.
                audited = [(index, scope.entry) for index, scope in scopes.items()]
                async with self.pool.acquire() as conn:
                    answers = list(await _insert(conn, items, tenant, handed_off, indexes, audited))
                for scope in scopes.values():
                    scope.written = True
                return answers
        answers = [(uuid.UUID(int=0), None)] * len(items)
        async with self.pool.acquire() as conn, conn.transaction():
            for (tenant, handed_off), indexes in groups.items():
                inserted = await _insert(conn, items, tenant, handed_off, indexes)
                for index, answer in zip(indexes, inserted, strict=True):
                    answers[index] = answer
            if scopes:
                made = [(scope.entry, cast(jobs_db.Inserted, answers[i])[0]) for i, scope in scopes.items()]
                await audit.insert_many(conn, made)
        for scope in scopes.values():  # committed: the requests' entries are written
            scope.written = True
        return answers

    async def insert(self, tenant: str | None, job: NewJob) -> uuid.UUID:
        """Insert `job`; within an audited request (shared/db/audit.py) with its entry."""
        job_id, _ = await self.submit((tenant, job, None, audit.pending()))
        return job_id

    def hand_off(
        self,
        tenant: str | None,
        job: NewJob,
        handoff: jobs_db.Handoff,
        written: Callable[[jobs_db.Inserted | BaseException], None],
    ) -> None:
        """Insert `job` leased on `handoff`'s terms when it may be (jobs.insert_handed_off);
        `written` gets its id and that lease (None when it was written waiting instead), or the
        error, once its group is written, whether or not anyone still waits for the job's id."""
        self.submit_nowait((tenant, job, handoff, audit.pending()), written)


async def _insert(
    conn: Connection,
    items: list[Enqueue],
    tenant: str | None,
    handed_off: bool,
    indexes: list[int],
    audited: list[tuple[int, AuditRecord]] | None = None,
) -> list[jobs_db.Inserted]:
    """One statement: the jobs of `items` at `indexes`, all of `tenant`'s and all handed off or
    none (with `audited`'s entries, by index into `items`, when the group is all of them)."""
    jobs = [items[i][1] for i in indexes]
    if handed_off:
        handoffs = [items[i][2] for i in indexes]
        return await jobs_db.insert_handed_off(conn, tenant, jobs, handoffs, audited or ())
    return [(job_id, None) for job_id in await jobs_db.insert_jobs(conn, tenant, jobs, audited or ())]
