"""queueflow.retry_delay_secs(config, attempt), the SQL behind every retry (remote fail, in-process
failure, janitor reclaim), sampled many times against shared.domain.backoff_bounds."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from shared.domain.jobs import MAX_DELAY_SECS, JobConfig

DEFAULT_CONFIG = msgspec.to_builtins(JobConfig())


def bounds(config, attempt):
    """The domain's bounds for a stored config (built unvalidated: the SQL clamps bad values too)."""
    return JobConfig(**config).backoff_bounds(attempt)


SAMPLES = 3000


async def sample(db, config: dict[str, Any], attempt: int, n: int = SAMPLES) -> list[float]:
    rows = await db.fetch(
        "SELECT queueflow.retry_delay_secs($1::jsonb, $2) AS d FROM generate_series(1, $3)",
        json.dumps(config),
        attempt,
        n,
    )
    return [r["d"] for r in rows]


def cfg(**overrides: Any) -> dict[str, Any]:
    return {**DEFAULT_CONFIG, **overrides}


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("fixed", [60, 60, 60, 60]),
        ("linear", [60, 120, 180, 240]),
        ("exponential", [60, 120, 240, 480]),
    ],
)
async def test_without_jitter_each_strategy_gives_its_exact_delay(db, strategy, expected):
    config = cfg(retry_backoff=strategy, jitter_factor=0.0)
    got = [
        await db.fetchval("SELECT queueflow.retry_delay_secs($1::jsonb, $2)", json.dumps(config), a)
        for a in range(4)
    ]
    assert got == expected
    assert [bounds(config, a) for a in range(4)] == [(e, e) for e in expected]


async def test_exponential_backoff_is_capped_at_retry_max_delay(db):
    config = cfg(jitter_factor=0.0)
    assert await sample(db, config, 5, 1) == [1920]
    assert await sample(db, config, 6, 1) == [3600]
    assert await sample(db, config, 20, 1) == [3600]


@pytest.mark.parametrize("attempt", [61, 62, 63, 200, 100_000])
async def test_huge_attempt_numbers_do_not_overflow(db, attempt):
    config = cfg(retry_delay_secs=MAX_DELAY_SECS, retry_max_delay_secs=MAX_DELAY_SECS, jitter_factor=0.0)
    assert await sample(db, config, attempt, 1) == [MAX_DELAY_SECS]


async def test_default_jitter_at_attempt_one_stays_within_ten_percent_and_spans_it(db):
    got = await sample(db, cfg(), 1)
    assert min(got) == 108 and max(got) == 132
    assert all(float(d).is_integer() for d in got)
    assert 115 < sum(got) / len(got) < 125


async def test_jitter_never_pushes_a_delay_past_the_cap(db):
    """The docs' example (base 2, cap 15, jitter 0.2): upstream could wait 18 s; we never exceed 15."""
    config = cfg(retry_delay_secs=2, retry_max_delay_secs=15, jitter_factor=0.2)
    delays = {a: await sample(db, config, a) for a in range(4)}
    assert max(delays[3]) == 15
    assert all(d <= 15 for ds in delays.values() for d in ds)
    assert bounds(config, 3) == (12, 15)
    assert min(delays[3]) == 12


CASES = [  # (base, cap, jitter)
    (60, 3600, 0.1),
    (7, 100, 0.5),
    (1, 5, 1.0),
    (30, 45, 0.25),
    (0, 3600, 0.3),
    (500, 400, 0.1),  # a cap below the base
    (3, 2_592_000, 0.05),
]


@pytest.mark.parametrize("strategy", ["fixed", "linear", "exponential"])
async def test_sampled_delays_stay_within_the_documented_bounds(db, strategy):
    for base, cap, jitter in CASES:
        for attempt in (0, 1, 3, 7, 30):
            config = cfg(
                retry_backoff=strategy, retry_delay_secs=base, retry_max_delay_secs=cap, jitter_factor=jitter
            )
            low, high = bounds(config, attempt)
            got = await sample(db, config, attempt, 1500)
            case = (config, attempt, low, high, min(got), max(got))
            assert low <= min(got) and max(got) <= high, case
            assert min(got) >= 0 and max(got) <= cap, case
            if high - low <= 40:
                # A narrow range is covered end to end by this many samples (a bound that is an
                # exact .5 tie is approached but, random() never being exactly 0 or 1, not hit).
                assert min(got) <= low + 1 and max(got) >= high - 1, case


@pytest.mark.parametrize(
    "config",
    [
        {},  # a config missing every field
        {"retry_backoff": "exponential"},
        {"jitter_factor": None, "retry_delay_secs": 5, "retry_backoff": "fixed"},
    ],
)
async def test_missing_fields_fall_back_to_the_domain_defaults(db, config):
    # Stored configs are always complete; should one not be, SQL falls back to JobConfig's
    # defaults (jitter 0.1 included, since migration 0005), the same ones the API fills in.
    got = await sample(db, config, 0, 200)
    low, high = JobConfig.of(config).backoff_bounds(0)
    assert low <= min(got) and max(got) <= high
    if high - low > 2:  # (a narrow range can round to one value)
        assert len(set(got)) > 1  # jittered


async def test_out_of_range_jitter_is_clamped_to_one(db):
    config = cfg(retry_backoff="fixed", retry_delay_secs=10, retry_max_delay_secs=100, jitter_factor=7.0)
    got = await sample(db, config, 0)
    assert min(got) >= 0 and max(got) <= 20
    assert bounds(config, 0) == (0, 20)
