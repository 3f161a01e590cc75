"""The W3C Trace Context headers as shared/domain/traces.py reads them: what is kept, what is
ignored (never an error), and how an over-long tracestate is cut."""

from __future__ import annotations

import pytest

from shared.domain.traces import (
    MAX_TRACESTATE_CHARS,
    TraceContext,
    parse_traceparent,
    parse_tracestate,
    trace_context,
)
from shared.tracing import configured

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{SPAN}-01"


@pytest.mark.parametrize(
    ("header", "kept"),
    [
        (VALID, VALID),
        (f"  {VALID}\t", VALID),  # optional whitespace around the value
        (f"00-{TRACE}-{SPAN}-00", f"00-{TRACE}-{SPAN}-00"),  # not sampled is still a context
        (f"cc-{TRACE}-{SPAN}-01-what-comes-later", VALID),  # a later version: its first fields
        (f"cc-{TRACE}-{SPAN}-01", VALID),
    ],
)
def test_a_valid_traceparent_is_kept_in_its_version_00_form(header, kept):
    assert parse_traceparent(header) == kept


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        f"00-{TRACE.upper()}-{SPAN}-01",  # uppercase hex
        f"00-{'0' * 32}-{SPAN}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent id
        f"ff-{TRACE}-{SPAN}-01",  # the forbidden version
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 has exactly four fields
        f"cc-{TRACE}-{SPAN}-01extra",  # a later version's extra fields follow a dash
        f"00-{TRACE[:-1]}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-1",
        f"00_{TRACE}_{SPAN}_01",
        f"00-{TRACE}-{SPAN}-01\n",
    ],
)
def test_a_malformed_traceparent_is_ignored(header):
    assert parse_traceparent(header) is None
    assert trace_context(header, "congo=t61rcWkgMzE") is None  # and its tracestate with it


@pytest.mark.parametrize(
    ("header", "kept"),
    [
        ("congo=t61rcWkgMzE", "congo=t61rcWkgMzE"),
        ("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
        ("a=1,,  ,b=2", "a=1,b=2"),  # empty members are dropped
        ("fw529a3039@dt=b", "fw529a3039@dt=b"),  # a multi-tenant key
        ("k=va lue", "k=va lue"),  # a space inside a value
    ],
)
def test_a_valid_tracestate_is_kept(header, kept):
    assert parse_tracestate(header) == kept
    assert trace_context(VALID, header) == TraceContext(VALID, kept)


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        " , ",
        "Upper=1",  # keys are lowercase
        "a=1,a=2",  # a key twice
        "a=",  # an empty value
        "a=b,c",  # a member without a value
        "a=b=c",
        "a=b\tc",  # a value is printable ASCII (spaces only inside it)
        "a=\u00e9",
        ",".join(f"k{i}=v" for i in range(33)),  # more than 32 members
    ],
)
def test_a_malformed_tracestate_is_dropped_alone(header):
    assert parse_tracestate(header) is None
    assert trace_context(VALID, header) == TraceContext(VALID, None)


def test_past_512_characters_long_members_go_first_then_the_last_ones():
    long = "big=" + "x" * 200
    members = [f"k{i}=" + "v" * 40 for i in range(12)]  # 12 * 44 + 11 commas = 539 characters
    kept = parse_tracestate(",".join([members[0], long, *members[1:]]))
    assert kept is not None and len(kept) <= MAX_TRACESTATE_CHARS
    assert "big=" not in kept
    assert kept.split(",") == members[:11]


def test_the_context_names_its_trace_and_parent():
    ctx = TraceContext(VALID)
    assert (ctx.trace_id, ctx.parent_id) == (TRACE, SPAN)


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
    ],
)
def test_traces_are_exported_only_when_an_otlp_endpoint_is_set(environ, on):
    assert configured(environ) is on
