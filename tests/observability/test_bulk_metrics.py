"""observe_many reaches into prometheus_client's histogram children: it must record exactly what
one observe() per value records, at every bucket edge (this pins the private attributes it uses)."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from shared.metrics import TurnBatch, observe_many

BUCKETS = (0.005, 0.01, 0.1, 1, 60)
VALUES = [0.0, 0.004, 0.005, 0.0050001, 0.01, 0.05, 0.1, 0.99, 1, 1.5, 60, 61, 3600, 0.2, 0.2]


def exposition(record) -> bytes:
    registry = CollectorRegistry()
    histogram = Histogram("h_seconds", "a histogram", ["task"], buckets=BUCKETS, registry=registry)
    record(histogram.labels("echo"))
    lines = generate_latest(registry).splitlines()
    return b"\n".join(line for line in lines if b"_created" not in line)  # a timestamp


def test_observe_many_records_what_one_observe_per_value_does():
    def one_by_one(child):
        for v in VALUES:
            child.observe(v)

    expected = exposition(one_by_one)
    assert b'h_seconds_count{task="echo"} 15.0' in expected
    assert exposition(lambda child: observe_many(child, VALUES)) == expected


def test_observe_many_of_nothing_records_nothing():
    assert exposition(lambda child: observe_many(child, [])) == exposition(lambda child: None)


async def test_a_turn_batch_records_a_turns_values_when_the_turn_ends():
    registry = CollectorRegistry()
    histogram = Histogram("t_seconds", "a histogram", buckets=BUCKETS, registry=registry)
    batch = TurnBatch(histogram)
    for v in VALUES:
        batch.observe(v)
    assert registry.get_sample_value("t_seconds_count") == 0.0
    await asyncio.sleep(0)
    assert registry.get_sample_value("t_seconds_count") == len(VALUES)
    assert registry.get_sample_value("t_seconds_bucket", {"le": "0.005"}) == 3.0
