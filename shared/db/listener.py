"""One LISTEN connection per process, fanned out to in-memory waiters.

Idle long-polls, in-process workers and SSE streams hold no database connection: they park on an
in-memory signal that this hub pokes when PostgreSQL sends a notification. NOTIFY is only a hint:
every wait has a timeout, and a reconnect wakes every waiter once, since notifications sent while
the connection was down are lost.

Lost wake-ups are impossible by construction: a claimer reads the queue's epoch *before* its claim
query and parks only if the epoch has not moved since (register, then re-check).

The hub's state per queue is bounded: a queue's entry that nobody waits on or claims through is
dropped after `IDLE_QUEUE_SECS`, and the oldest such entries once more than `MAX_IDLE_QUEUES` are
kept, so a process's memory does not grow with every queue name it has ever seen. Epochs come from
one counter for the whole hub: an entry made again after a drop starts at an epoch no waiter has
read, so a waiter that read the dropped one's returns at once instead of parking (ADR 0003).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

import asyncpg
import structlog

log = structlog.get_logger("queueflow.listener")

WORK = "queueflow_work"  # payload: queue name; a due job was inserted or re-queued
DELAYED = "queueflow_delayed"  # payload: queue name; a future-dated job appeared
JOB_EVENTS = "queueflow_job_events"  # payload: "<job id>:<status>"
WORKFLOW = "queueflow_workflow"  # an outbox row was written: the advancer has work
WORKFLOW_EVENTS = "queueflow_workflow_events"  # payload: workflow id; a watched workflow changed
WORKER_KEYS = "queueflow_worker_keys"  # payload: worker key id; the key was revoked
TIMERS = "queueflow_timers"  # a sleeping or waiting workflow step's wake-up was armed
PUSH = "queueflow_push"  # payload: push endpoint id; the endpoint was created, changed or removed
CHANNELS = (WORK, DELAYED, JOB_EVENTS, WORKFLOW, WORKFLOW_EVENTS, WORKER_KEYS, TIMERS, PUSH)

# Claim queries one process runs at once for one queue: enough to keep a busy queue's batches
# flowing, and a cap on the burst when thousands of long-polls arrive together.
CLAIMS_PER_QUEUE = 2

# A queue's entry nobody waits on or claims through is dropped once untouched for this long, or
# sooner, oldest first, while the hub holds more than MAX_IDLE_QUEUES entries. Dropping one costs at
# most one claim that the "known empty" shortcut would have spared.
IDLE_QUEUE_SECS = 60.0
MAX_IDLE_QUEUES = 1_000

# The advancer parks on this pseudo-queue (no real queue name can contain a NUL byte).
ADVANCE = "\0advance"
# ... and the workflow process's timer loop on this one.
TIMER = "\0timers"


class _Gate(asyncio.Semaphore):
    """A queue's claim gate (`CLAIMS_PER_QUEUE` places), counting the claims that hold or wait
    for a place, so that the hub never drops the entry of a queue being claimed."""

    def __init__(self) -> None:
        super().__init__(CLAIMS_PER_QUEUE)
        self.users = 0

    async def acquire(self) -> Literal[True]:
        self.users += 1
        try:
            return await super().acquire()
        except BaseException:
            self.users -= 1
            raise

    def release(self) -> None:
        self.users -= 1
        super().release()


class _QueueSignal:
    __slots__ = (
        "checked_at", "empty_epoch", "epoch", "gate", "observers", "tenants_empty", "touched", "waiters",
    )  # fmt: skip

    def __init__(self, epoch: int, now: float) -> None:
        self.epoch = epoch
        self.touched = now  # when a claimer last used it (time.monotonic)
        self.waiters: deque[asyncio.Future[Any]] = deque()
        # Waiters that may take only some of the queue's jobs (a worker key's, its tenant's): every
        # poke wakes them all, and they never use up a wake-up another waiter would act on.
        self.observers: set[asyncio.Future[Any]] = set()
        self.empty_epoch: int | None = None  # the epoch at which a claim last found nothing
        self.checked_at = float("-inf")  # when a claim last looked (loop time)
        # Per tenant: the epoch at which a claim of only that tenant's jobs (a worker key's) left
        # none of them claimable, and when; emptied by the next poke.
        self.tenants_empty: dict[str, tuple[int, float]] = {}
        self.gate = _Gate()

    def idle(self) -> bool:
        """Nobody parked on it or claiming through its gate: it may be dropped."""
        return not self.waiters and not self.observers and self.gate.users == 0


class Hub:
    """In-memory fan-out of notifications; fed by `Listener`, usable on its own in tests."""

    def __init__(
        self, *, max_idle_queues: int = MAX_IDLE_QUEUES, idle_queue_secs: float = IDLE_QUEUE_SECS
    ) -> None:
        self._queues: dict[str, _QueueSignal] = {}
        self._epochs = itertools.count(1)  # one counter for every queue: see the module's text
        self._sweep_at = 0  # entries at which the next new one sweeps first (set with the bound)
        self.max_idle_queues = max_idle_queues
        self.idle_queue_secs = idle_queue_secs
        self._job_watchers: dict[str, set[Callable[[str], None]]] = {}
        self._all_job_watchers: set[Callable[[str, str], None]] = set()
        self._delayed_watchers: set[Callable[[str], None]] = set()
        self._key_watchers: set[Callable[[str], None]] = set()
        self._push_watchers: set[Callable[[str], None]] = set()
        self.connected = False

    # -- queues -----------------------------------------------------------------------------------

    def _signal(self, queue: str) -> _QueueSignal:
        """The queue's entry, made when there is none, and marked as used now."""
        now = time.monotonic()
        sig = self._queues.get(queue)
        if sig is None:
            if len(self._queues) >= self._sweep_at:
                self.sweep(now)
            sig = self._queues[queue] = _QueueSignal(next(self._epochs), now)
        else:
            sig.touched = now
        return sig

    @property
    def max_idle_queues(self) -> int:
        """Entries kept beyond those in use before the oldest idle ones go."""
        return self._max_idle_queues

    @max_idle_queues.setter
    def max_idle_queues(self, bound: int) -> None:
        # (the next sweep comes from the new bound, not from one set before it)
        self._max_idle_queues = bound
        self._sweep_at = max(len(self._queues), bound)

    def tracked_queues(self) -> int:
        """How many queues the hub holds an entry for."""
        return len(self._queues)

    def sweep(self, now: float | None = None) -> int:
        """Drop the entries nobody waits on or claims through that are untouched for
        `idle_queue_secs`, then the oldest of the rest while more than `max_idle_queues` entries
        are held; returns how many went. The listener calls it at each connection check, and a
        new entry when the hub has grown by half since the last sweep (so its cost is spread over
        the entries made in between)."""
        now = time.monotonic() if now is None else now
        idle = sorted((sig.touched, queue) for queue, sig in self._queues.items() if sig.idle())
        stale = now - self.idle_queue_secs
        excess = len(self._queues) - self.max_idle_queues
        dropped = 0
        for touched, queue in idle:
            if touched > stale and dropped >= excess:
                break
            del self._queues[queue]
            dropped += 1
        self._sweep_at = max(len(self._queues), self.max_idle_queues) * 3 // 2 + 1
        return dropped

    def epoch(self, queue: str) -> int:
        return self._signal(queue).epoch

    def gate(self, queue: str) -> asyncio.Semaphore:
        return self._signal(queue).gate

    def known_empty(self, queue: str, seen_epoch: int, max_age: float) -> bool:
        """True when a claim found the queue empty at `seen_epoch`, nothing was announced since,
        the listener is connected (so nothing could have been missed), and that claim is younger
        than `max_age` seconds. Then a claim would find nothing: park instead of asking."""
        sig = self._signal(queue)
        return (
            self.connected
            and sig.empty_epoch == seen_epoch
            and asyncio.get_running_loop().time() - sig.checked_at < max_age
        )

    def claimed(self, queue: str, seen_epoch: int, may_have_more: bool) -> None:
        """A claim ran after reading `seen_epoch`. `may_have_more` is False only when it left no
        claimable job of the queue behind, which only a claim of every tenant's jobs can say."""
        sig = self._signal(queue)
        sig.checked_at = asyncio.get_running_loop().time()
        sig.empty_epoch = None if may_have_more else seen_epoch

    def tenant_claimed(self, queue: str, tenant: str, seen_epoch: int, may_have_more: bool) -> None:
        """A claim of only `tenant`'s jobs ran after reading `seen_epoch`; `may_have_more` is
        False when it left none of that tenant's jobs claimable."""
        sig = self._signal(queue)
        if may_have_more:
            sig.tenants_empty.pop(tenant, None)
        else:
            sig.tenants_empty[tenant] = (seen_epoch, asyncio.get_running_loop().time())

    def tenant_known_empty(self, queue: str, tenant: str, seen_epoch: int, max_age: float) -> bool:
        """`known_empty` for one tenant's jobs of the queue: true when the queue is known empty, or
        when a claim of only that tenant's jobs found none left at `seen_epoch`, younger than
        `max_age` seconds, and the listener is connected."""
        if self.known_empty(queue, seen_epoch, max_age):
            return True
        recorded = self._signal(queue).tenants_empty.get(tenant)
        return (
            self.connected
            and recorded is not None
            and recorded[0] == seen_epoch
            and asyncio.get_running_loop().time() - recorded[1] < max_age
        )

    def waiting(self, queue: str) -> int:
        sig = self._queues.get(queue)
        return 0 if sig is None else sum(1 for f in (*sig.waiters, *sig.observers) if not f.done())

    async def wait(
        self,
        queue: str,
        seen_epoch: int,
        timeout: float,
        *,
        observe: bool = False,
        waiter: asyncio.Future[Any] | None = None,
    ) -> bool:
        """Park until the queue is poked after `seen_epoch`, or `timeout`. True when poked.
        `observe`: the waiter claims only part of the queue's jobs, so a wake-up meant for a job it
        cannot take must not be spent on it: every poke wakes it, beside the waiters it wakes.
        `waiter`: the future to park on (a poke sets its result to None), when the caller may also
        be answered another way (a hand-off, shared/runtime/leasing.py); cancelled if unanswered."""
        sig = self._signal(queue)
        if sig.epoch != seen_epoch:
            return True
        fut = waiter if waiter is not None else asyncio.get_running_loop().create_future()
        if observe:
            sig.observers.add(fut)
        else:
            sig.waiters.append(fut)
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # races with the future completing, and a shutdown would then never end.
            async with asyncio.timeout(timeout):
                await fut
            return True
        except TimeoutError:
            return False
        finally:
            if not fut.done():
                fut.cancel()
            sig.observers.discard(fut)
            with contextlib.suppress(ValueError):
                sig.waiters.remove(fut)

    def withdraw(self, queue: str, waiter: asyncio.Future[Any]) -> None:
        """Take a parked `waiter` out of the queue's wake-ups: it will be answered another way
        (its `wait` still ends at its timeout)."""
        sig = self._queues.get(queue)
        if sig is None:
            return
        sig.observers.discard(waiter)
        with contextlib.suppress(ValueError):
            sig.waiters.remove(waiter)

    def poke(self, queue: str, wake: int = 1) -> None:
        """New work on `queue`: bump its epoch and wake up to `wake` parked waiters (FIFO).

        One notification wakes one waiter; a waiter that then claims a full batch pokes again, so
        a large insert spreads over as many waiters as it needs without a thundering herd.
        """
        sig = self._queues.get(queue)
        if sig is None:
            # Nobody here has read the queue's epoch since its entry was made, or it was dropped:
            # an entry made later starts at a new epoch, so there is nothing to record.
            return
        sig.epoch = next(self._epochs)
        if sig.tenants_empty:
            sig.tenants_empty.clear()  # (their epochs are stale now; the dict stays small)
        for observer in sig.observers:
            if not observer.done():
                observer.set_result(None)
        while wake > 0 and sig.waiters:
            fut = sig.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                wake -= 1

    def wake_all(self) -> None:
        """After a reconnect: notifications may have been missed, so everyone re-checks."""
        for queue, sig in list(self._queues.items()):
            self.poke(queue, wake=len(sig.waiters))
        for watchers in list(self._job_watchers.values()):
            for cb in list(watchers):
                cb("")
        for cb in list(self._delayed_watchers):
            cb("")
        for cb in list(self._key_watchers):
            cb("")
        for cb in list(self._push_watchers):
            cb("")

    # -- jobs and delayed work --------------------------------------------------------------------

    def watch_job(self, job_id: str, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call `callback(status)` on every announced status change of `job_id`; returns the
        unsubscribe."""
        return self._watch("job:" + job_id, callback)

    def watch_all_jobs(self, callback: Callable[[str, str], None]) -> Callable[[], None]:
        """Call `callback(job_id, status)` on every announced job status change: one subscription
        for a worker runtime's many jobs instead of one per job."""
        self._all_job_watchers.add(callback)
        return lambda: self._all_job_watchers.discard(callback)

    def watch_workflow(self, workflow_id: str, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call `callback("")` whenever a watched workflow or one of its steps changes."""
        return self._watch("wf:" + workflow_id, callback)

    def _watch(self, key: str, callback: Callable[[str], None]) -> Callable[[], None]:
        self._job_watchers.setdefault(key, set()).add(callback)

        def unsubscribe() -> None:
            watchers = self._job_watchers.get(key)
            if watchers is not None:
                watchers.discard(callback)
                if not watchers:
                    del self._job_watchers[key]

        return unsubscribe

    def watch_delayed(self, callback: Callable[[str], None]) -> Callable[[], None]:
        self._delayed_watchers.add(callback)
        return lambda: self._delayed_watchers.discard(callback)

    def watch_worker_keys(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call `callback(key_id)` when a worker key is revoked, and `callback("")` when
        notifications may have been missed (the LISTEN connection was lost or regained)."""
        self._key_watchers.add(callback)
        return lambda: self._key_watchers.discard(callback)

    def watch_push(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call `callback(endpoint_id)` when a push endpoint changes, and `callback("")` when
        notifications may have been missed."""
        self._push_watchers.add(callback)
        return lambda: self._push_watchers.discard(callback)

    def dispatch(self, channel: str, payload: str) -> None:
        if channel == WORK:
            self.poke(payload)
        elif channel == JOB_EVENTS:
            job_id, _, status = payload.partition(":")
            for cb in list(self._job_watchers.get("job:" + job_id, ())):
                cb(status)
            for every in list(self._all_job_watchers):
                every(job_id, status)
        elif channel == WORKFLOW:
            self.poke(ADVANCE)
        elif channel == WORKFLOW_EVENTS:
            for cb in list(self._job_watchers.get("wf:" + payload, ())):
                cb("")
        elif channel == DELAYED:
            for cb in list(self._delayed_watchers):
                cb(payload)
        elif channel == WORKER_KEYS:
            for cb in list(self._key_watchers):
                cb(payload)
        elif channel == TIMERS:
            self.poke(TIMER)
        elif channel == PUSH:
            for cb in list(self._push_watchers):
                cb(payload)


class Listener:
    """Keeps one LISTEN connection alive and feeds `hub`; reconnects and wakes everyone on loss."""

    def __init__(self, dsn: str, hub: Hub, check_interval: float = 5.0) -> None:
        self.dsn = dsn
        self.hub = hub
        self.check_interval = check_interval
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def start(self, wait: float = 10.0) -> None:
        self._task = asyncio.create_task(self._run(), name="queueflow-listener")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), wait)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _on_notify(self, _conn: object, _pid: int, channel: str, payload: object) -> None:
        self.hub.dispatch(channel, str(payload))

    async def _run(self) -> None:
        while True:
            conn: asyncpg.Connection[asyncpg.Record] | None = None
            try:
                conn = await asyncpg.connect(
                    self.dsn, server_settings={"application_name": "queueflow-listener"}
                )
                for channel in CHANNELS:
                    await conn.add_listener(channel, self._on_notify)
                # A closed socket (a server crash or restart) is noticed at once; a silent peer
                # (a cut network) by the periodic check.
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
                self.hub.connected = True
                self._ready.set()
                log.info("listener_connected")
                self.hub.wake_all()
                while True:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.check_interval):
                            await lost.wait()
                    if lost.is_set() or conn.is_closed():
                        raise ConnectionError("the LISTEN connection was closed")
                    await asyncio.wait_for(conn.fetchval("SELECT 1"), self.check_interval)
                    self.hub.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("listener_disconnected", error=str(err))
            finally:
                self.hub.connected = False
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), 2)
            self.hub.wake_all()
            await asyncio.sleep(1.0)
