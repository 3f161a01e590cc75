"""Admission: bounds on what callers can make one process hold or do on their behalf.

`Occupancy` counts long-lived requests of one kind (open SSE streams, parked lease long-polls) per
tenant and in all, against two caps: past its tenant's the caller is a 429 (TooManyRequests),
past the process-wide one a 503 (Overloaded), both with Retry-After. A tenant's count goes when it
reaches zero, so the table never holds more tenants than requests are open.

`RateTable` is a token bucket per source address, for work a caller can make the server do
without holding any credential (looking up a worker key nobody has minted). It keeps at most
`size` sources, the least recently seen dropped first, so presenting many addresses costs the
server no more memory than the cap.

Both are per process (processes coordinate only through PostgreSQL, and what these protect,
connections, memory and the event loop, is each process's own).
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
from collections import OrderedDict
from collections.abc import Iterator

from shared.domain.errors import Overloaded, TooManyRequests

MAX_SOURCES = 10_000  # addresses a RateTable remembers at most


class Occupancy:
    """Open `what`s (e.g. "event streams") by tenant; `most` and `most_per_tenant` 0 are no cap.
    A tenant None (the global worker token, which acts for every tenant) counts against `most`
    only."""

    def __init__(self, what: str, most: int, most_per_tenant: int, retry_after: int) -> None:
        self.what = what
        self.most = most
        self.most_per_tenant = most_per_tenant
        self.retry_after = retry_after
        self.total = 0
        self._by_tenant: dict[str, int] = {}

    def held_by(self, tenant: str) -> int:
        return self._by_tenant.get(tenant, 0)

    def take(self, tenant: str | None) -> None:
        """One more open for `tenant`, or TooManyRequests (the tenant is at its cap) or Overloaded
        (the process is at its cap), taking nothing."""
        if tenant is not None and self.most_per_tenant and self.held_by(tenant) >= self.most_per_tenant:
            raise TooManyRequests(
                f"too many {self.what} open for this tenant: at most {self.most_per_tenant} at once"
                " on this server process; retry later",
                self.retry_after,
            )
        if self.most and self.total >= self.most:
            raise Overloaded(
                f"too many {self.what} open on this server process: at most {self.most} at once; retry later",
                self.retry_after,
            )
        self.total += 1
        if tenant is not None:
            self._by_tenant[tenant] = self.held_by(tenant) + 1

    def give_back(self, tenant: str | None) -> None:
        self.total -= 1
        if tenant is not None:
            left = self._by_tenant.pop(tenant) - 1
            if left:
                self._by_tenant[tenant] = left

    @contextlib.contextmanager
    def held(self, tenant: str | None) -> Iterator[None]:
        """take() for the `with` block, given back however it ends."""
        self.take(tenant)
        try:
            yield
        finally:
            self.give_back(tenant)


def source_of(address: str | None) -> str:
    """The source a RateTable counts a request under: its peer's IP address, or for IPv6 the
    address's /64 (one host is usually given a whole /64); "" when there is none (a Unix socket)."""
    if not address:
        return ""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class RateTable:
    """A token bucket of `burst` tokens per source, refilled at `rate` a second (`rate` 0: no
    limit). Times are the caller's monotonic seconds."""

    def __init__(self, rate: float, burst: int, size: int = MAX_SOURCES) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self.size = size
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, as of when

    def _tokens(self, source: str, now: float) -> float:
        tokens, when = self._buckets.get(source, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - when) * self.rate)

    def _set(self, source: str, tokens: float, now: float) -> None:
        self._buckets[source] = (tokens, now)
        self._buckets.move_to_end(source)
        while len(self._buckets) > self.size:
            self._buckets.popitem(last=False)

    def take(self, source: str, now: float) -> int:
        """Spend one of `source`'s tokens and answer 0; or, when it has none, spend nothing and
        answer the whole seconds until it will have one (at least 1)."""
        if not self.rate:
            return 0
        tokens = self._tokens(source, now)
        if tokens < 1.0:
            self._set(source, tokens, now)
            return max(1, math.ceil((1.0 - tokens) / self.rate))
        self._set(source, tokens - 1.0, now)
        return 0

    def give_back(self, source: str, now: float) -> None:
        """Return a token spent by take() (what it was spent on turned out to cost nothing)."""
        if self.rate and source in self._buckets:
            self._set(source, min(float(self.burst), self._tokens(source, now) + 1.0), now)

    def __len__(self) -> int:
        return len(self._buckets)
