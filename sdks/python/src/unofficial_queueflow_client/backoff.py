"""Exponential backoff with jitter, for retrying calls the server could not answer."""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["Backoff"]


class Backoff:
    """Delays that double from ``initial`` up to ``maximum`` seconds, each scaled down by a random
    factor in ``[1 - jitter, 1]`` so that many workers do not retry in lockstep.

    ``next()`` returns the delay before the next attempt; ``reset()`` after a success.
    """

    def __init__(
        self,
        initial: float = 0.1,
        maximum: float = 5.0,
        factor: float = 2.0,
        jitter: float = 0.5,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if initial <= 0 or maximum < initial or factor < 1 or not 0 <= jitter <= 1:
            raise ValueError("need 0 < initial <= maximum, factor >= 1 and 0 <= jitter <= 1")
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._rng = rng
        self.attempts = 0

    def next(self) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(self.attempts, 64))
        self.attempts += 1
        return base * (1 - self.jitter * self._rng())

    def reset(self) -> None:
        self.attempts = 0
