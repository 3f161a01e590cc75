"""Prometheus metrics, defined once. Labels are bounded (route, method, status, queue): never ids.
Names that come from clients (tasks, queues) are labelled as themselves up to a bound and as
`_other` past it; tenant ids are hashed unless the operator asks for them (`tenant_label`)."""

from __future__ import annotations

import asyncio
import bisect
import collections
import hashlib
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

JOBS_CREATED = Counter("queueflow_jobs_created", "Jobs this process enqueued.", registry=REGISTRY)
JOBS_COMPLETED = Counter(
    "queueflow_jobs_completed", "Jobs completed through this process.", registry=REGISTRY
)
JOBS_FAILED = Counter(
    "queueflow_jobs_failed", "Jobs that failed permanently through this process.", registry=REGISTRY
)
JOBS_RETRIED = Counter("queueflow_jobs_retried", "Retries this process scheduled.", registry=REGISTRY)
JOBS_DEAD_LETTERED = Counter(
    "queueflow_jobs_dead_lettered", "Jobs this process moved to the DLQ.", registry=REGISTRY
)
JOBS_RETRIED_IN_PLACE = Counter(
    "queueflow_jobs_retried_in_place",
    "Failed or cancelled jobs run again through the retry routes.",
    registry=REGISTRY,
)
JOBS_CANCELLED = Counter(
    "queueflow_jobs_cancelled", "Jobs cancelled through this process.", registry=REGISTRY
)
JOBS_HANDED_OFF = Counter(
    "queueflow_jobs_handed_off",
    "Jobs this process inserted already leased to a lease call parked on their queue (the hand-off).",
    registry=REGISTRY,
)
LEASES_RECLAIMED = Counter(
    "queueflow_leases_reclaimed", "Expired leases the janitor reclaimed.", registry=REGISTRY
)
LIMIT_SLOTS_REPAIRED = Counter(
    "queueflow_limit_slots_repaired",
    "Limit keys whose running count the janitor found wrong and set right (should stay 0).",
    registry=REGISTRY,
)
WORKFLOWS_CREATED = Counter("queueflow_workflows_created", "Workflows created.", registry=REGISTRY)
WORKFLOWS_COMPLETED = Counter("queueflow_workflows_completed", "Workflows completed.", registry=REGISTRY)
WORKFLOWS_FAILED = Counter(
    "queueflow_workflows_failed", "Workflows failed or partially failed.", registry=REGISTRY
)

HANDLER_DURATION = Histogram(
    "queueflow_handler_duration_seconds",
    "Wall time of in-process handlers.",
    ["task"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
# By queue, bounded as task names are (queue_label).
QUEUE_WAIT = Histogram(
    "queueflow_job_queue_wait_seconds",
    "From a job falling due to its claim.",
    ["queue"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)

# Attempts by task and outcome (docs/visibility.md). Task names come from clients, so the label is
# bounded: the first MAX_TASK_LABELS names this process sees are labelled as themselves, any later
# one as OTHER_TASKS. The outcome is one of the seven AttemptOutcome values.
ATTEMPTS = Counter(
    "queueflow_job_attempts",
    "Job attempts that ended through this process, by task and outcome.",
    ["task", "outcome"],
    registry=REGISTRY,
)
ATTEMPT_DURATION = Histogram(
    "queueflow_job_attempt_duration_seconds",
    "From an attempt's lease to its end, by task and outcome.",
    ["task", "outcome"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
MAX_TASK_LABELS = 200
OTHER_TASKS = "_other"
_task_labels: set[str] = set()


def task_label(task: str) -> str:
    """`task` as a label value, within the bound."""
    return _bounded(_task_labels, MAX_TASK_LABELS, task, OTHER_TASKS)


# Queue names come from clients too (a write key may enqueue on as many as its tenant's cap
# allows): the first MAX_QUEUE_LABELS this process labels are themselves, later ones OTHER_QUEUES.
# The per-queue gauges name the busiest MAX_QUEUE_LABELS queues of each scrape and sum the rest.
MAX_QUEUE_LABELS = 200
OTHER_QUEUES = "_other"
_queue_labels: set[str] = set()


def queue_label(queue: str) -> str:
    """`queue` as a label value, within the bound."""
    return _bounded(_queue_labels, MAX_QUEUE_LABELS, queue, OTHER_QUEUES)


def _bounded(seen: set[str], bound: int, value: str, other: str) -> str:
    if value in seen:
        return value
    if len(seen) < bound:
        seen.add(value)
        return value
    return other


def tenant_label(tenant: str, *, as_is: bool = False) -> str:
    """A tenant id as a label value: the first 12 hex digits of its SHA-256 (`as_is`: the id
    itself, --metrics-tenant-ids). Jobs without a tenant keep the empty label. The hash keeps ids
    out of what every scraper and dashboard sees; anyone who knows an id can still compute its
    label (`printf %s ID | sha256sum | cut -c1-12`), so it is a pseudonym, not a secret."""
    if as_is or not tenant:
        return tenant
    return hashlib.sha256(tenant.encode()).hexdigest()[:12]


def attempts_ended(outcome: str, ended: Sequence[tuple[str, float | None]]) -> None:
    """Count attempts that ended with `outcome`, each given as (task, seconds since its lease began,
    or None when unknown); one bulk observation per task."""
    if not ended:
        return
    by_task: dict[str, list[float | None]] = {}
    for task, secs in ended:
        by_task.setdefault(task, []).append(secs)
    for task, values in by_task.items():
        label = task_label(task)
        ATTEMPTS.labels(label, outcome).inc(len(values))
        observe_many(ATTEMPT_DURATION.labels(label, outcome), [max(0.0, v) for v in values if v is not None])


HTTP_REQUESTS = Counter(
    "queueflow_http_requests", "HTTP requests served.", ["method", "route", "status"], registry=REGISTRY
)
HTTP_DURATION = Histogram(
    "queueflow_http_request_duration_seconds",
    "HTTP request latency.",
    ["method", "route"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
# (method, route, status) -> the two series one answer moves: labels() validates and locks on every
# call, and the worker protocol's routes answer thousands of times a second. Methods, routes
# (canonical paths) and statuses are bounded, and these series are never removed.
_HTTP_SERIES: dict[tuple[str, str, int], tuple[Any, Any]] = {}


def http_served(method: str, route: str, status: int, secs: float) -> None:
    """Count one answer and its duration."""
    series = _HTTP_SERIES.get((method, route, status))
    if series is None:
        series = (HTTP_REQUESTS.labels(method, route, str(status)), HTTP_DURATION.labels(method, route))
        _HTTP_SERIES[(method, route, status)] = series
    series[0].inc()
    series[1].observe(secs)


LONG_POLL_WAITERS = Gauge(
    "queueflow_long_poll_waiters", "Lease requests parked in a long-poll.", registry=REGISTRY
)

STORE_UP = Gauge("queueflow_store_up", "1 if the database answered this scrape.", registry=REGISTRY)
# Set once at start from the pooler probe (shared/db/pooler.py).
DB_TRANSACTION_POOLER = Gauge(
    "queueflow_db_transaction_pooler",
    "1 if DATABASE_URL was found at start to go through a transaction pooler.",
    registry=REGISTRY,
)
NOTIFICATIONS_POLLED = Gauge(
    "queueflow_notifications_polled",
    "1 if this process has no LISTEN connection (its listen URL goes through a transaction pooler)"
    " and waiters re-check for work on a timer instead of being notified.",
    registry=REGISTRY,
)
QUEUE_PENDING = Gauge(
    "queueflow_queue_pending_jobs", "Claimable jobs, all tenants.", ["queue"], registry=REGISTRY
)
QUEUE_SCHEDULED = Gauge(
    "queueflow_queue_scheduled_jobs", "Jobs waiting for a future run time.", ["queue"], registry=REGISTRY
)
QUEUE_RUNNING = Gauge("queueflow_queue_running_jobs", "Jobs currently leased.", ["queue"], registry=REGISTRY)
QUEUE_OLDEST = Gauge(
    "queueflow_queue_oldest_pending_age_seconds",
    "Age of the oldest claimable job.",
    ["queue"],
    registry=REGISTRY,
)
_QUEUE_GAUGES = (QUEUE_PENDING, QUEUE_SCHEDULED, QUEUE_RUNNING, QUEUE_OLDEST)


def set_queue_gauges(rows: list[tuple[str | None, int, int, int, float]] | None) -> None:
    """Replace the per-queue gauges with a fresh reading (a queue that has gone loses its series);
    None means the database did not answer, and a row with queue None sums the queues past the
    label bound."""
    for gauge in _QUEUE_GAUGES:
        gauge.clear()
    if rows is None:
        STORE_UP.set(0)
        return
    STORE_UP.set(1)
    for name, pending, scheduled, running, oldest in rows:
        queue = OTHER_QUEUES if name is None else name
        QUEUE_PENDING.labels(queue).set(pending)
        QUEUE_SCHEDULED.labels(queue).set(scheduled)
        QUEUE_RUNNING.labels(queue).set(running)
        QUEUE_OLDEST.labels(queue).set(oldest)


LIMIT_RUNNING = Gauge(
    "queueflow_limit_running_jobs",
    "Jobs holding a slot of a limit key, fleet-wide (the busiest keys; the rest as key _other).",
    ["tenant", "key"],
    registry=REGISTRY,
)
LIMIT_THROTTLED = Gauge(
    "queueflow_limit_throttled_claims",
    "Times a claim left a job of a limit key waiting for room, fleet-wide, since the key was first seen.",
    ["tenant", "key"],
    registry=REGISTRY,
)
OTHER_KEYS = "_other"


def set_limit_gauges(
    rows: Sequence[tuple[str | None, str | None, int, int]] | None, *, tenant_ids: bool = False
) -> None:
    """Replace the per-key gauges with a fresh reading (None: the database did not answer); a row
    with key None sums the keys past the label bound. Tenants are labelled by `tenant_label`."""
    LIMIT_RUNNING.clear()
    LIMIT_THROTTLED.clear()
    for tenant, key, running, throttled in rows or ():
        labels = (tenant_label(tenant or "", as_is=tenant_ids), OTHER_KEYS if key is None else key)
        LIMIT_RUNNING.labels(*labels).set(running)
        LIMIT_THROTTLED.labels(*labels).set(throttled)


def observe_many(histogram: Any, values: Sequence[float]) -> None:
    """Record `values` in a (labelled) histogram at once: one increment per bucket touched and one
    of the sum, where `observe` takes two locked increments per value (a tenth of the in-process
    drain's CPU). prometheus_client has no bulk call, so this reads the child's `_upper_bounds`,
    `_buckets` and `_sum`; tests/observability/test_bulk_metrics.py pins them against `observe`."""
    if not values:
        return
    bounds = histogram._upper_bounds
    for index, count in collections.Counter(bisect.bisect_left(bounds, v) for v in values).items():
        histogram._buckets[index].inc(count)
    histogram._sum.inc(sum(values))


class TurnBatch:
    """Observations of one histogram gathered during an event-loop turn and recorded together at
    its end (a burst of finished handlers is one `observe_many`)."""

    def __init__(self, histogram: Any) -> None:
        self.histogram = histogram
        self._values: list[float] = []

    def observe(self, value: float) -> None:
        if not self._values:
            asyncio.get_running_loop().call_soon(self.flush)
        self._values.append(value)

    def flush(self) -> None:
        values, self._values = self._values, []
        observe_many(self.histogram, values)


# Push delivery (docs/push.md), per endpoint: its tenant (as `tenant_label` makes it) and its name,
# the first MAX_ENDPOINT_LABELS endpoints this process labels as themselves, later ones `_other`.
MAX_ENDPOINT_LABELS = 200
_endpoint_labels: set[str] = set()
PUSH_DELIVERIES = Counter(
    "queueflow_push_deliveries",
    "Push deliveries this process made, by what the answer did: completed, accepted (a 202), retry,"
    " failed, lost (the job was no longer the delivery's when its outcome was written).",
    ["tenant", "endpoint", "outcome"],
    registry=REGISTRY,
)
PUSH_DURATION = Histogram(
    "queueflow_push_delivery_duration_seconds",
    "From a push delivery's request to its answer (or its failure).",
    ["tenant", "endpoint"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
PUSH_IN_FLIGHT = Gauge(
    "queueflow_push_in_flight",
    "Push deliveries this process is making now.",
    ["tenant", "endpoint"],
    registry=REGISTRY,
)
PUSH_BREAKER_OPEN = Gauge(
    "queueflow_push_breaker_open",
    "1 while an endpoint's circuit breaker is open or half-open, as this process last read it.",
    ["tenant", "endpoint"],
    registry=REGISTRY,
)


def endpoint_labels(tenant: str, name: str, *, tenant_ids: bool = False) -> tuple[str, str]:
    """An endpoint's (tenant, endpoint) label values, within the bound."""
    label = tenant_label(tenant, as_is=tenant_ids)
    key = f"{label}\0{name}"
    if _bounded(_endpoint_labels, MAX_ENDPOINT_LABELS, key, "") == key:
        return label, name
    return label, "_other"
