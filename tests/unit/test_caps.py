"""The caps' rules without a server (shared/domain/caps.py, shared/domain/admission.py): how an error
text is cut, what an error message quotes of an input, how payloads are measured, and the two
bounded tables: open requests by tenant, and token buckets by source address."""

from __future__ import annotations

import json

import pytest

from shared.domain import caps
from shared.domain.admission import Occupancy, RateTable, source_of
from shared.domain.caps import (
    MAX_ERROR_BYTES,
    check_size,
    check_sizes,
    check_workflow_sizes,
    quoted,
    truncated_error,
)
from shared.domain.errors import ContentTooLarge, Overloaded, TooManyRequests
from shared.domain.workflows import WorkflowDefinition, WorkflowStep

# --- error texts -----------------------------------------------------------------------------------


def test_an_error_within_64_kib_is_kept_as_it_is():
    for text in ("", "boom", "x" * MAX_ERROR_BYTES, "é" * (MAX_ERROR_BYTES // 2)):
        assert truncated_error(text) == text


@pytest.mark.parametrize("unit", ["x", "é", "€", "𝄞"], ids=["1-byte", "2-byte", "3-byte", "4-byte"])
def test_a_longer_error_is_cut_to_64_kib_at_a_character_boundary_with_a_marker(unit):
    text = unit * (MAX_ERROR_BYTES + 1000)
    kept = truncated_error(text)
    encoded = kept.encode()
    assert len(encoded) <= MAX_ERROR_BYTES
    assert len(encoded) > MAX_ERROR_BYTES - 64  # the marker takes what room it needs, no more
    head, marker = kept.split("... [truncated: ")
    assert text.startswith(head) and set(head) == {unit}
    left_out = int(marker.removesuffix(" more bytes]"))
    assert left_out == len(text.encode()) - len(head.encode())  # the count is exact


def test_the_cap_is_the_argument_when_given():
    kept = truncated_error("abcdefghij" * 10, most=40)
    assert len(kept.encode()) <= 40 and kept.startswith("abc") and kept.endswith("more bytes]")


def test_a_lone_surrogate_does_not_break_the_cut():
    kept = truncated_error("\ud800" + "x" * MAX_ERROR_BYTES)
    assert kept.endswith("more bytes]")
    assert len(kept.encode(errors="surrogatepass")) <= MAX_ERROR_BYTES


# --- what errors quote -----------------------------------------------------------------------------


def test_an_error_quotes_a_short_input_whole_and_a_long_one_only_in_part():
    assert quoted("abc") == "'abc'"
    long = "y" * 2_000_000
    shown = quoted(long)
    assert len(shown) < 200 and shown.startswith("'yyyy") and "1999936 more characters" in shown


# --- payload sizes ---------------------------------------------------------------------------------


def test_a_payload_is_measured_as_the_compact_json_the_server_stores():
    payload = {"text": "é" * 10, "n": [1, 2, 3]}
    size = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
    check_size("payload", payload, size)  # exactly at the cap: taken
    with pytest.raises(ContentTooLarge) as refused:
        check_size("payload", payload, size - 1)
    assert refused.value.message == (
        f"payload too large: payload takes {size} bytes of JSON; this server takes at most {size - 1}"
    )


def test_no_cap_and_no_payload_are_never_refused():
    check_size("payload", {"x": "y" * 10_000}, 0)
    check_size("payload", None, 1)
    check_size("payload", {}, 1)


def test_values_each_within_the_cap_pass_though_together_they_are_over_it():
    values = [{"blob": "x" * 400}, None, {"blob": "y" * 400}, {"blob": "z" * 400}]
    check_sizes(values, 1000, lambda n: f"jobs[{n}]")  # 1,2xx bytes together, 411 each
    values[2] = {"blob": "y" * 1000}
    with pytest.raises(ContentTooLarge, match=r"^payload too large: jobs\[2\] takes 1011 bytes"):
        check_sizes(values, 1000, lambda n: f"jobs[{n}]")


def test_a_workflow_names_the_part_that_is_too_large():
    big = {"blob": "z" * 100}
    inner = WorkflowDefinition(name="inner", steps=[WorkflowStep(name="s", task_name="t", payload=big)])
    outer = WorkflowDefinition(
        name="w",
        steps=[WorkflowStep(name="a", task_name="t"), WorkflowStep(name="b", workflow=inner)],
    )
    with pytest.raises(ContentTooLarge, match=r"steps\[1\]\.workflow\.steps\[0\]\.payload takes"):
        check_workflow_sizes(outer, 50)
    with pytest.raises(ContentTooLarge, match="context takes"):
        check_workflow_sizes(WorkflowDefinition(name="w", steps=inner.steps, context=big), 50)
    check_workflow_sizes(outer, 1000)
    check_workflow_sizes(outer, 0)


def test_the_defaults_are_a_mebibyte():
    assert caps.DEFAULT_MAX_PAYLOAD_BYTES == caps.DEFAULT_MAX_RESULT_BYTES == 1024 * 1024


# --- open requests by tenant -----------------------------------------------------------------------


def test_a_tenant_past_its_share_is_429_and_the_process_past_its_cap_503():
    streams = Occupancy("event streams", most=3, most_per_tenant=2, retry_after=5)
    streams.take("acme")
    streams.take("acme")
    with pytest.raises(TooManyRequests) as mine:
        streams.take("acme")
    assert mine.value.retry_after == 5 and "at most 2" in mine.value.message
    streams.take("globex")
    with pytest.raises(Overloaded) as everyone:
        streams.take("initech")
    assert everyone.value.retry_after == 5 and "at most 3" in everyone.value.message
    with pytest.raises(Overloaded):
        streams.take(None)  # the worker token counts against the process's cap only
    assert streams.total == 3  # a refusal takes nothing
    streams.give_back("acme")
    streams.take("initech")
    assert (streams.held_by("acme"), streams.held_by("initech"), streams.total) == (1, 1, 3)


def test_a_tenant_that_holds_nothing_leaves_no_entry():
    polls = Occupancy("long-polls", most=0, most_per_tenant=0, retry_after=1)
    for n in range(1000):
        with polls.held(f"tenant-{n}"), polls.held(None):
            pass
    assert polls.total == 0 and polls._by_tenant == {}


def test_held_gives_back_when_the_block_raises():
    polls = Occupancy("long-polls", most=1, most_per_tenant=1, retry_after=1)
    with pytest.raises(RuntimeError), polls.held("acme"):
        raise RuntimeError
    polls.take("acme")


def test_no_caps_take_any_number():
    polls = Occupancy("long-polls", most=0, most_per_tenant=0, retry_after=1)
    for _ in range(10_000):
        polls.take("acme")
    assert polls.held_by("acme") == 10_000


# --- token buckets by source -----------------------------------------------------------------------


def test_a_source_spends_its_burst_then_waits_for_the_rate():
    table = RateTable(rate=2.0, burst=3)
    assert [table.take("10.0.0.1", 100.0) for _ in range(3)] == [0, 0, 0]
    assert table.take("10.0.0.1", 100.0) == 1  # half a second for the next token: at least 1
    assert table.take("10.0.0.2", 100.0) == 0  # another source has its own bucket
    assert table.take("10.0.0.1", 100.5) == 0  # one token back after 1/rate seconds
    assert table.take("10.0.0.1", 100.5) == 1


def test_a_slow_rate_says_how_long_to_wait():
    table = RateTable(rate=0.01, burst=1)
    assert table.take("s", 0.0) == 0
    assert table.take("s", 0.0) == 100
    assert table.take("s", 50.0) == 50


def test_a_token_given_back_is_spent_again():
    table = RateTable(rate=0.001, burst=1)
    assert table.take("s", 0.0) == 0
    table.give_back("s", 0.0)
    assert table.take("s", 0.0) == 0
    assert table.take("s", 0.0) > 0


def test_the_table_keeps_at_most_its_size_of_sources():
    table = RateTable(rate=1.0, burst=1, size=100)
    for n in range(10_000):
        table.take(f"10.0.{n // 256}.{n % 256}", 0.0)
    assert len(table) == 100


def test_rate_zero_is_no_limit():
    table = RateTable(rate=0.0, burst=1)
    assert all(table.take("s", 0.0) == 0 for _ in range(1000))
    assert len(table) == 0


def test_ipv6_sources_are_counted_by_their_64_and_ipv4_by_address():
    assert source_of("2001:db8:1:2:aaaa::1") == source_of("2001:db8:1:2:bbbb::7") == "2001:db8:1:2::/64"
    assert source_of("2001:db8:1:3::1") != source_of("2001:db8:1:2::1")
    assert source_of("192.0.2.7") == "192.0.2.7" != source_of("192.0.2.8")
    assert source_of(None) == source_of("") == ""
