"""Series of what happened to a tenant's jobs over time (GET /api/v1/stats/series, the console's
charts), from the per-minute rollup of migration 39: the metrics, windows and steps a series may
ask for, how a step's figures are made from the rollup's minutes, and the response records.

Counts (enqueued, completed, failed, retried) are the jobs of each step: a series adds up to the
jobs of its window. Backlog (pending, scheduled, running) is the janitor's last sample in the step.
Wait and run percentiles come from histograms whose buckets are a quarter of an octave wide
(migration 39, queueflow.stats_bucket): a figure is the middle of the bucket the percentile falls
in. A step with nothing in it is 0, never a gap.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from msgspec import Struct

from shared.domain.errors import ValidationFailed


class Metric(enum.StrEnum):
    ENQUEUED = "enqueued"
    COMPLETED = "completed"
    FAILED = "failed"
    RETRIED = "retried"
    PENDING = "pending"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    WAIT_P50 = "wait_p50"
    WAIT_P95 = "wait_p95"
    RUN_P50 = "run_p50"
    RUN_P95 = "run_p95"


COUNTS = (Metric.ENQUEUED, Metric.COMPLETED, Metric.FAILED, Metric.RETRIED)
BACKLOG = (Metric.PENDING, Metric.SCHEDULED, Metric.RUNNING)
# metric: (histogram kind of the rollup, percentile)
PERCENTILES = {
    Metric.WAIT_P50: ("w", 0.50),
    Metric.WAIT_P95: ("w", 0.95),
    Metric.RUN_P50: ("r", 0.50),
    Metric.RUN_P95: ("r", 0.95),
}
UNITS = {**dict.fromkeys((*COUNTS, *BACKLOG), "jobs"), **dict.fromkeys(PERCENTILES, "seconds")}

# The windows a series covers, and the step each gets when none is asked for (15 to 96 points).
WINDOWS = {"15m": 900, "1h": 3600, "6h": 21600, "24h": 86400}
DEFAULT_STEPS = {"15m": "1m", "1h": "1m", "6h": "5m", "24h": "15m"}
STEPS = {"1m": 60, "5m": 300, "10m": 600, "15m": 900, "30m": 1800, "1h": 3600}
MAX_METRICS = len(Metric)
MAX_FAILING_TASKS = 10

# The histogram of migration 39: bucket 0 is under BUCKET_BASE seconds, bucket b > 0 is
# [BUCKET_BASE * 2^((b-1)/4), BUCKET_BASE * 2^(b/4)).
BUCKET_BASE = 0.0001
BUCKETS_PER_OCTAVE = 4


@dataclass(frozen=True)
class SeriesQuery:
    """What a caller asked for: metrics (in its order, each once), a queue or None for every queue
    of the tenant, a window and a step (both named as in WINDOWS and STEPS)."""

    metrics: tuple[Metric, ...]
    queue: str | None
    window: str
    step: str

    @property
    def window_secs(self) -> int:
        return WINDOWS[self.window]

    @property
    def step_secs(self) -> int:
        return STEPS[self.step]

    @property
    def points(self) -> int:
        return self.window_secs // self.step_secs


def series_query(
    metrics: Sequence[str], queue: str | None, window: str | None, step: str | None
) -> SeriesQuery:
    """Check a series request's parameters (None: absent, so the default); every problem is a
    400 that names the parameter."""
    if not metrics:
        raise ValidationFailed(f"metric is required: one or more (comma-separated) of {', '.join(Metric)}")
    chosen: list[Metric] = []
    for name in (name for raw in metrics for name in raw.split(",")):
        if name not in Metric.__members__.values():
            raise ValidationFailed(f"metric must be one of {', '.join(Metric)}, not {name!r}")
        if Metric(name) not in chosen:
            chosen.append(Metric(name))
    window = "1h" if window is None else window
    if window not in WINDOWS:
        raise ValidationFailed(f"window must be one of {', '.join(WINDOWS)}, not {window!r}")
    step = DEFAULT_STEPS[window] if step is None else step
    if step not in STEPS:
        raise ValidationFailed(f"step must be one of {', '.join(STEPS)}, not {step!r}")
    if STEPS[step] > WINDOWS[window] or WINDOWS[window] % STEPS[step]:
        raise ValidationFailed(f"step {step} does not divide window {window} into whole steps")
    return SeriesQuery(tuple(chosen), queue, window, step)


# A `metric` parameter: one or more names, comma-separated (the OpenAPI document's pattern).
METRICS_PATTERN = "^({names})(,({names}))*$".format(names="|".join(Metric))


def failing_window(window: str | None) -> str:
    """The window of a top-failing-tasks request (None: absent, so 1h)."""
    window = "1h" if window is None else window
    if window not in WINDOWS:
        raise ValidationFailed(f"window must be one of {', '.join(WINDOWS)}, not {window!r}")
    return window


def window_of(query: SeriesQuery, rolled_up_to: datetime) -> tuple[datetime, datetime]:
    """[start, end) of a series: it ends at the first step boundary (UTC, whole multiples of the
    step since the epoch) at or after the last minute the rollup counted, so its last step is the
    newest one with counted minutes in it, and starts a window earlier."""
    step = query.step_secs
    stamp = rolled_up_to.timestamp()
    end = datetime.fromtimestamp(math.ceil(stamp / step) * step, tz=rolled_up_to.tzinfo)
    return end - timedelta(seconds=query.window_secs), end


def bucket_value(bucket: int) -> float:
    """The figure a histogram bucket stands for: its geometric middle (half the base for 0)."""
    if bucket <= 0:
        return BUCKET_BASE / 2
    return BUCKET_BASE * 2 ** ((bucket - 0.5) / BUCKETS_PER_OCTAVE)


def bucket_of(secs: float) -> int:
    """The bucket of a duration, as queueflow.stats_bucket files it (for tests and the bench)."""
    if secs < BUCKET_BASE:
        return 0
    return min(250, 1 + math.floor(BUCKETS_PER_OCTAVE * math.log2(secs / BUCKET_BASE)))


def percentile(histogram: Mapping[int, int], fraction: float) -> float:
    """The nearest-rank percentile of a histogram (bucket: jobs), 0 for an empty one."""
    total = sum(histogram.values())
    if total <= 0:
        return 0.0
    rank = max(1, math.ceil(fraction * total))
    seen = 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= rank:
            return round(bucket_value(bucket), 6)
    return round(bucket_value(max(histogram)), 6)  # pragma: no cover (the loop always reaches rank)


class Series(Struct, frozen=True):
    """One metric's figure at each step, in the order of `timestamps`."""

    metric: str
    unit: str
    values: list[float]


class SeriesResponse(Struct, frozen=True, omit_defaults=True):
    """Series over [start, end), one figure per step; `timestamps` are the steps' starts.
    `rolled_up_to`: the rollup has counted every minute before it (the janitor moves it about a
    minute behind the clock); later minutes of the window count 0 until it has."""

    window: str
    step: str
    step_secs: int
    start: datetime
    end: datetime
    rolled_up_to: datetime
    timestamps: list[datetime]
    series: list[Series]
    queue: str | None = None


class FailingTask(Struct, frozen=True):
    task: str
    failures: int
    last_failed_at: datetime


class FailingTasksResponse(Struct, frozen=True, omit_defaults=True):
    """The tasks whose jobs failed for good (each a dead letter) most often in [start, end)."""

    window: str
    start: datetime
    end: datetime
    tasks: list[FailingTask]
    queue: str | None = None


@dataclass(frozen=True)
class Rollup:
    """The rollup's rows over a window, each keyed by its step's index: counts per metric name,
    the last backlog sample's figures, and histograms per kind ('w', 'r')."""

    counts: Mapping[int, Mapping[str, int]]
    backlog: Mapping[int, Mapping[str, int]]
    histograms: Mapping[tuple[int, str], Mapping[int, int]]


def build_series(query: SeriesQuery, rollup: Rollup) -> list[Series]:
    """Every asked metric at every step of the window, 0 where the rollup has nothing."""
    out = []
    for metric in query.metrics:
        values: list[float]
        if metric in COUNTS or metric in BACKLOG:
            source = rollup.counts if metric in COUNTS else rollup.backlog
            values = [source.get(i, {}).get(str(metric), 0) for i in range(query.points)]
        else:
            kind, fraction = PERCENTILES[metric]
            values = [percentile(rollup.histograms.get((i, kind), {}), fraction) for i in range(query.points)]
        out.append(Series(metric=str(metric), unit=UNITS[metric], values=values))
    return out


def histogram_kinds(metrics: Iterable[Metric]) -> list[str]:
    """The histogram kinds the asked metrics read ('w' wait, 'r' run)."""
    return sorted({PERCENTILES[m][0] for m in metrics if m in PERCENTILES})
