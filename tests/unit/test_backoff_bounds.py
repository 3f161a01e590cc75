"""shared.domain.backoff_bounds: the documented retry delays (API-NOTES section 7), capped, with
jitter that never exceeds the cap."""

from __future__ import annotations

import msgspec
import pytest

from shared.domain.jobs import MAX_DELAY_SECS, JobConfig

DEFAULT_CONFIG = msgspec.to_builtins(JobConfig())


def bounds(config, attempt):
    """The domain's bounds for a stored config (built unvalidated: the SQL clamps bad values too)."""
    return JobConfig(**config).backoff_bounds(attempt)


def cfg(**overrides):
    return {**DEFAULT_CONFIG, **overrides}


def test_the_documented_default_retries_wait_about_one_two_and_four_minutes():
    config = DEFAULT_CONFIG
    assert [bounds(config, a) for a in range(3)] == [(54, 66), (108, 132), (216, 264)]


@pytest.mark.parametrize(
    ("strategy", "delays"),
    [
        ("fixed", [60, 60, 60, 60]),
        ("linear", [60, 120, 180, 240]),
        ("exponential", [60, 120, 240, 480]),
    ],
)
def test_strategies_without_jitter(strategy, delays):
    config = cfg(retry_backoff=strategy, jitter_factor=0.0)
    assert [bounds(config, a) for a in range(4)] == [(d, d) for d in delays]


def test_every_strategy_is_capped():
    for strategy in ("fixed", "linear", "exponential"):
        config = cfg(
            retry_backoff=strategy, retry_delay_secs=100, retry_max_delay_secs=150, jitter_factor=0.0
        )
        expected = (100, 100) if strategy == "fixed" else (150, 150)
        assert bounds(config, 10) == expected


def test_exponential_reaches_the_default_cap_by_attempt_twenty():
    assert bounds(cfg(jitter_factor=0.0), 20) == (3600, 3600)


def test_jitter_is_applied_after_the_cap_but_never_exceeds_it():
    # The docs' example: base 2, cap 15, jitter 0.2. Upstream allowed 18 s; the cap holds here.
    config = cfg(retry_delay_secs=2, retry_max_delay_secs=15, jitter_factor=0.2)
    assert bounds(config, 3) == (12, 15)
    assert bounds(config, 0) == (2, 2)  # 1.6..2.4 rounds to 2..2


@pytest.mark.parametrize("attempt", [62, 63, 1000, 10**9])
def test_the_exponent_is_limited_so_huge_attempts_do_not_overflow(attempt):
    config = cfg(retry_delay_secs=MAX_DELAY_SECS, retry_max_delay_secs=MAX_DELAY_SECS, jitter_factor=0.5)
    low, high = bounds(config, attempt)
    assert high == MAX_DELAY_SECS
    assert low == MAX_DELAY_SECS // 2


def test_jitter_is_clamped_to_zero_and_one():
    config = cfg(retry_backoff="fixed", retry_delay_secs=10, retry_max_delay_secs=100)
    assert bounds({**config, "jitter_factor": 7.0}, 0) == (0, 20)
    assert bounds({**config, "jitter_factor": -1.0}, 0) == (10, 10)
    assert bounds({**config, "jitter_factor": None}, 0) == (10, 10)


def test_a_zero_base_means_an_immediate_retry():
    assert bounds(cfg(retry_delay_secs=0), 5) == (0, 0)


@pytest.mark.parametrize("strategy", ["fixed", "linear", "exponential"])
@pytest.mark.parametrize("jitter", [0.0, 0.1, 0.5, 1.0])
def test_bounds_are_ordered_non_negative_and_within_the_cap(strategy, jitter):
    for base, cap in [(1, 1), (5, 3), (60, 3600), (3600, 60), (0, 0)]:
        for attempt in range(0, 70, 7):
            low, high = bounds(
                cfg(
                    retry_backoff=strategy,
                    retry_delay_secs=base,
                    retry_max_delay_secs=cap,
                    jitter_factor=jitter,
                ),
                attempt,
            )
            assert 0 <= low <= high <= cap
