"""The body reader's depth check (shared/web/body.py) against the depth a recursive walk of the
decoded value finds, over random JSON whose strings hold brackets, quotes and backslashes."""

import json
import random
from typing import Any

import pytest

from shared.web.body import nested_deeper_than

_TRICKY = ["a{b", "x]", '"q"', "\\", "", "[[", "}}}", '\\"[', "{}", "\\\\]"]


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _value(rng: random.Random, levels: int) -> Any:
    roll = rng.random()
    if levels <= 0 or roll < 0.2:
        return rng.choice([*_TRICKY, 1, None, 2.5, True])
    if roll < 0.6:
        return [_value(rng, levels - 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(_TRICKY) + str(i): _value(rng, levels - 1) for i in range(rng.randint(0, 3))}


@pytest.mark.parametrize("seed", range(4))
def test_the_depth_check_agrees_with_a_walk_of_the_decoded_value(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(2000):
        value = _value(rng, rng.randint(1, 14))
        raw = json.dumps(value, separators=(",", ":") if rng.random() < 0.5 else None).encode()
        depth = _depth(value)
        for limit in (1, 2, 3, 5, 8, 13):
            assert nested_deeper_than(raw, limit) == (depth > limit), (raw, limit)


def test_a_hundred_levels_pass_and_a_hundred_and_one_do_not() -> None:
    assert not nested_deeper_than(b"[" * 100 + b"]" * 100, 100)
    assert nested_deeper_than(b"[" * 101 + b"]" * 101, 100)
    assert nested_deeper_than(b'{"a":' * 101 + b"1" + b"}" * 101, 100)
    assert not nested_deeper_than(b'["' + b"[" * 200 + b'"]', 100)  # brackets inside a string
