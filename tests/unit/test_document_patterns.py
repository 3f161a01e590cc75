"""The OpenAPI document's patterns and the server's checks are built from the same constants; these
tests hold them to the same meaning (services/api/openapi.py, shared/domain/jobs.py and cron.py)."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.domain import cron
from shared.domain.errors import ValidationFailed
from shared.domain.jobs import NON_BLANK_PATTERN, QUEUE_NAME_PATTERN, check_queue_name, check_task_name

# Whitespace and control characters all lie in the Basic Multilingual Plane (the last is U+3000),
# so the BMP and a few characters beyond it cover every case.
EVERY_CHARACTER = [
    chr(c) for c in [*range(0x10000), 0x10000, 0x1F600, sys.maxunicode] if not 0xD800 <= c <= 0xDFFF
]


def test_no_whitespace_character_lies_beyond_the_characters_checked():
    """The rules concern whitespace and the C0/C1 controls: all of them are in the BMP."""
    assert max(c for c in range(sys.maxunicode + 1) if chr(c).isspace()) == 0x3000


def _accepted(check, value: str) -> bool:
    try:
        check(value)
    except ValidationFailed:
        return False
    return True


def test_the_queue_name_pattern_allows_exactly_the_characters_the_server_allows():
    pattern = re.compile(QUEUE_NAME_PATTERN)
    disagree = [c for c in EVERY_CHARACTER if bool(pattern.search(c)) != _accepted(check_queue_name, c)]
    assert disagree == []


def test_the_non_blank_pattern_is_the_task_name_rule_less_nul():
    pattern = re.compile(NON_BLANK_PATTERN)
    for c in EVERY_CHARACTER:
        expected = _accepted(check_task_name, c) and c != "\x00"
        assert bool(pattern.search(f" {c} ")) == expected, hex(ord(c))


@settings(
    max_examples=400, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)
@given(st.from_regex(cron.CRON_PATTERN, fullmatch=True).filter(lambda e: len(e) <= cron.MAX_CRON_EXPR))
def test_every_cron_expression_the_document_allows_fires_again(expr):  # (pattern and maxLength)
    cron.validate(expr)


@pytest.mark.parametrize("expr", ["", "* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *"])
def test_the_cron_pattern_refuses_what_the_server_refuses(expr):
    assert re.search(cron.CRON_PATTERN, expr) is None
    with pytest.raises(ValidationFailed):
        cron.validate(expr)
