"""SeenRecently: which lease calls an api process records in the worker registry."""

from __future__ import annotations

from shared.domain.visibility import SeenRecently


def test_a_worker_is_recorded_once_per_interval_per_queue_and_tenants():
    seen = SeenRecently(every=10.0)
    assert seen.due("w1", "q", ("",), reported=False, now=100.0)
    assert not seen.due("w1", "q", ("",), reported=False, now=105.0)  # within the interval
    assert seen.due("w1", "q2", ("",), reported=False, now=105.0)  # another queue
    assert seen.due("w1", "q", ("", "acme"), reported=False, now=105.0)  # another tenant's jobs
    assert seen.due("w2", "q", ("",), reported=False, now=105.0)  # another worker
    assert seen.due("w1", "q", ("",), reported=False, now=110.0)  # the interval passed
    assert not seen.due("w1", "q", ("",), reported=False, now=115.0)


def test_a_call_that_says_what_the_worker_is_is_always_recorded():
    seen = SeenRecently(every=10.0)
    assert seen.due("w1", "q", ("",), reported=False, now=0.0)
    assert seen.due("w1", "q", ("",), reported=True, now=1.0)


def test_a_record_that_did_not_land_is_tried_again_and_memory_is_bounded():
    seen = SeenRecently(every=10.0, remembered=2)
    assert seen.due("w1", "q", ("",), reported=False, now=0.0)
    seen.forget("w1", "q", ("",))
    assert seen.due("w1", "q", ("",), reported=False, now=1.0)
    assert seen.due("w2", "q", ("",), reported=False, now=1.0)
    assert seen.due("w3", "q", ("",), reported=False, now=1.0)  # full: forgets the rest, records
    assert seen.due("w1", "q", ("",), reported=False, now=2.0)  # forgotten: recorded again
