"""Waiting for work without fixed sleeps: poll a condition until it holds or a deadline passes."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

T = TypeVar("T")


def _describe(predicate: Callable[..., object]) -> str:
    if getattr(predicate, "__name__", "") == "<lambda>":
        try:
            return inspect.getsource(predicate).strip()
        except (OSError, TypeError):
            pass
    return getattr(predicate, "__qualname__", repr(predicate))


async def eventually(
    predicate: Callable[[], T | Awaitable[T]],
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str | None = None,
) -> T:
    """Call `predicate` (sync or async) until it returns something truthy, and return that.

    An AssertionError raised by the predicate counts as "not yet", so a predicate may use plain
    asserts. Any other exception propagates at once. On timeout, raises AssertionError naming the
    condition and the last value (or assertion) seen.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        failure: AssertionError | None = None
        last: object = None
        try:
            result = predicate()
            if inspect.isawaitable(result):
                result = await result
        except AssertionError as exc:
            failure = exc
        else:
            if result:
                return cast(T, result)
            last = result
        if loop.time() >= deadline:
            detail = f"last assertion: {failure}" if failure is not None else f"last value: {last!r}"
            what = message or _describe(predicate)
            raise AssertionError(f"not true within {timeout}s: {what} ({detail})") from failure
        await asyncio.sleep(interval)
