"""`when` conditions, evaluated against the workflow context when a step becomes ready.

A leaf reads a dotted `path` (`validate.ok` is the `ok` key of step `validate`'s result) and
compares it with `value` using `op`: eq (the default with a value), ne, gt, gte, lt, lte,
exists (the default without a value), contains, in. `all`, `any` and `not` combine conditions.
A missing path satisfies only `ne` (and `not exists`); ordering compares numbers with numbers and
strings with strings, anything else is false.
"""

from __future__ import annotations

from typing import Any

_MISSING = object()


def lookup(context: Any, path: str) -> Any:
    """The value at a dotted path; list elements are addressed by index (`items.0`)."""
    value = context
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _comparable(a: Any, b: Any) -> bool:
    def number(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool)

    return (number(a) and number(b)) or (isinstance(a, str) and isinstance(b, str))


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1, while 1 and 1.0 are the same number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def holds(cond: dict[str, Any], context: dict[str, Any]) -> bool:
    if "all" in cond:
        return all(holds(c, context) for c in cond["all"])
    if "any" in cond:
        return any(holds(c, context) for c in cond["any"])
    if "not" in cond:
        return not holds(cond["not"], context)
    actual = lookup(context, cond["path"])
    has_value = "value" in cond
    op = cond.get("op") or ("eq" if has_value else "exists")
    expected = cond.get("value")
    if op == "exists":
        return actual is not _MISSING
    if actual is _MISSING:
        return op == "ne"
    if op == "eq":
        return _json_equal(actual, expected)
    if op == "ne":
        return not _json_equal(actual, expected)
    if op in ("gt", "gte", "lt", "lte"):
        if not _comparable(actual, expected):
            return False
        return {
            "gt": actual > expected,
            "gte": actual >= expected,
            "lt": actual < expected,
            "lte": actual <= expected,
        }[op]
    if op == "contains":
        if isinstance(actual, str):
            return isinstance(expected, str) and expected in actual
        if isinstance(actual, list):
            return expected in actual
        if isinstance(actual, dict):
            return isinstance(expected, str) and expected in actual
        return False
    if op == "in":
        return isinstance(expected, list) and actual in expected
    return False
