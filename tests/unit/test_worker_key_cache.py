"""The worker key cache and the Authenticator's use of it, without a database: which tokens are
looked up at all, how long an answer is kept, and what drops it; how long an unknown digest is
kept, and the per-source rate of lookups of unknown keys."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from shared.config import Settings, parse_api_keys
from shared.domain.admission import RateTable
from shared.domain.errors import Forbidden, TooManyRequests, Unauthorized
from shared.domain.worker_keys import WorkerGrant, token_digest
from shared.web import auth
from shared.web.auth import Authenticator, WorkerKeyCache

TOKEN = "qfwk_" + "k" * 43


def grant(expires_at: datetime | None = None) -> WorkerGrant:
    return WorkerGrant(key_id=uuid.uuid4(), tenant="acme", queues=None, expires_at=expires_at)


class Lookups:
    """A stand-in for the database: the keys it holds by digest, and the digests asked about."""

    def __init__(self, **keys: WorkerGrant) -> None:
        self.keys = {token_digest(token): g for token, g in keys.items()}
        self.asked: list[bytes] = []
        self.read = asyncio.Event()  # set by each lookup once it has read its answer
        self.gate: asyncio.Event | None = None  # when set, a lookup answers only once it is set

    async def __call__(self, digest: bytes) -> WorkerGrant | None:
        self.asked.append(digest)
        found = self.keys.get(digest)
        self.read.set()
        if self.gate is not None:
            await self.gate.wait()
        return found


def authenticator(lookups: Lookups, listening: bool = True) -> Authenticator:
    settings = Settings(
        database_url="postgresql://unused/none",
        dev=False,
        worker_token="wtok",
        api_keys=parse_api_keys("key1:acme"),
    )
    found = Authenticator(settings)
    found.worker_keys = WorkerKeyCache(lookups, lambda: listening)
    return found


async def test_only_tokens_shaped_like_keys_are_looked_up():
    lookups = Lookups()
    auth_ = authenticator(lookups)
    for token in ("nope", "wrong-token", "QFWK_x", "key1x"):
        with pytest.raises(Unauthorized):
            await auth_.worker(f"Bearer {token}")
        with pytest.raises(Unauthorized):
            await auth_.tenant(f"Bearer {token}")
    assert await auth_.worker("Bearer wtok") is None
    assert (await auth_.tenant("Bearer key1")).id == "acme"
    assert lookups.asked == []
    with pytest.raises(Unauthorized):
        await auth_.worker(f"Bearer {TOKEN}")
    assert lookups.asked == [token_digest(TOKEN)]


async def test_a_live_key_opens_the_worker_routes_and_is_refused_on_tenant_routes():
    key = grant()
    auth_ = authenticator(Lookups(**{TOKEN: key}))
    assert await auth_.worker(f"Bearer {TOKEN}") == key
    with pytest.raises(Forbidden):
        await auth_.tenant(f"Bearer {TOKEN}")


async def test_an_answer_is_kept_and_unknown_tokens_too():
    lookups = Lookups(**{TOKEN: grant()})
    auth_ = authenticator(lookups)
    for _ in range(3):
        await auth_.worker(f"Bearer {TOKEN}")
        with pytest.raises(Unauthorized):
            await auth_.worker("Bearer qfwk_unknown")
    assert len(lookups.asked) == 2


async def test_expiry_is_checked_at_every_use_of_a_kept_key():
    lookups = Lookups(**{TOKEN: grant(expires_at=datetime.now(UTC) + timedelta(milliseconds=200))})
    auth_ = authenticator(lookups)
    await auth_.worker(f"Bearer {TOKEN}")
    await asyncio.sleep(0.25)  # past the key's own expiry, well inside the cache's life
    with pytest.raises(Unauthorized):
        await auth_.worker(f"Bearer {TOKEN}")
    assert len(lookups.asked) == 1


async def test_a_kept_answer_lives_at_most_key_cache_secs(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(auth.time, "monotonic", lambda: clock[0])
    lookups = Lookups(**{TOKEN: grant()})
    cache = WorkerKeyCache(lookups, lambda: True)
    await cache.find(token_digest(TOKEN))
    clock[0] += auth.KEY_CACHE_SECS - 0.1
    await cache.find(token_digest(TOKEN))
    assert len(lookups.asked) == 1
    clock[0] += 0.2
    await cache.find(token_digest(TOKEN))
    assert len(lookups.asked) == 2


async def test_forgetting_a_key_drops_it_and_only_it():
    one, two = grant(), grant()
    lookups = Lookups(**{TOKEN: one, "qfwk_two": two})
    cache = WorkerKeyCache(lookups, lambda: True)
    await cache.find(token_digest(TOKEN))
    await cache.find(token_digest("qfwk_two"))
    cache.forget(str(one.key_id))
    await cache.find(token_digest(TOKEN))
    await cache.find(token_digest("qfwk_two"))
    assert lookups.asked.count(token_digest(TOKEN)) == 2
    assert lookups.asked.count(token_digest("qfwk_two")) == 1
    cache.forget("")  # notifications may have been missed: everything goes
    await cache.find(token_digest("qfwk_two"))
    assert lookups.asked.count(token_digest("qfwk_two")) == 2


async def test_nothing_is_kept_while_revocations_could_go_unheard():
    listening = [False]
    lookups = Lookups(**{TOKEN: grant()})
    cache = WorkerKeyCache(lookups, lambda: listening[0])
    await cache.find(token_digest(TOKEN))
    await cache.find(token_digest(TOKEN))
    assert len(lookups.asked) == 2
    listening[0] = True
    await cache.find(token_digest(TOKEN))
    listening[0] = False  # the LISTEN connection is lost: what was kept is not trusted
    await cache.find(token_digest(TOKEN))
    assert len(lookups.asked) == 4


async def test_a_lookup_overtaken_by_a_revocation_is_not_kept():
    key = grant()
    lookups = Lookups(**{TOKEN: key})
    cache = WorkerKeyCache(lookups, lambda: True)
    lookups.gate = asyncio.Event()
    pending = asyncio.create_task(cache.find(token_digest(TOKEN)))
    await lookups.read.wait()
    cache.forget(str(key.key_id))  # the row was deleted while the lookup was under way
    del lookups.keys[token_digest(TOKEN)]
    lookups.gate.set()
    assert await pending == key  # read before the delete: used once
    assert await cache.find(token_digest(TOKEN)) is None  # but not kept


# --- unknown keys: the negative cache and the per-source rate -------------------------------------


def _clock(monkeypatch) -> list[float]:
    clock = [1000.0]
    monkeypatch.setattr(auth.time, "monotonic", lambda: clock[0])
    return clock


async def test_an_unknown_digest_is_kept_a_second_and_a_key_minted_after_the_miss_is_taken_after_it(
    monkeypatch,
):
    clock = _clock(monkeypatch)
    lookups = Lookups()
    cache = WorkerKeyCache(lookups, lambda: True)
    assert await cache.find(token_digest(TOKEN)) is None
    key = grant()
    lookups.keys[token_digest(TOKEN)] = key  # minted (or restored) after the miss
    clock[0] += auth.UNKNOWN_KEY_CACHE_SECS - 0.01
    assert await cache.find(token_digest(TOKEN)) is None  # still the kept miss: no query
    assert len(lookups.asked) == 1
    clock[0] += 0.02  # the documented second has passed
    assert await cache.find(token_digest(TOKEN)) == key
    assert len(lookups.asked) == 2
    assert auth.UNKNOWN_KEY_CACHE_SECS <= 1.0  # README: within a second, as a revocation


async def test_unknown_digests_are_kept_while_the_listen_connection_is_down_but_keys_are_not(monkeypatch):
    _clock(monkeypatch)
    lookups = Lookups(**{TOKEN: grant()})
    cache = WorkerKeyCache(lookups, lambda: False)
    for _ in range(3):
        await cache.find(token_digest("qfwk_unknown"))
        await cache.find(token_digest(TOKEN))
    # A miss needs no notification to end (it ends on its own within a second); a key does.
    assert lookups.asked.count(token_digest("qfwk_unknown")) == 1
    assert lookups.asked.count(token_digest(TOKEN)) == 3


async def test_unknown_digests_never_push_a_known_key_out(monkeypatch):
    _clock(monkeypatch)
    monkeypatch.setattr(auth, "UNKNOWN_KEY_CACHE_SIZE", 5)
    lookups = Lookups(**{TOKEN: grant()})
    cache = WorkerKeyCache(lookups, lambda: True)
    await cache.find(token_digest(TOKEN))
    for n in range(50):
        await cache.find(token_digest(f"qfwk_unknown_{n}"))
    assert len(cache._unknown) == 5  # bounded, the oldest gone first
    await cache.find(token_digest(TOKEN))
    assert lookups.asked.count(token_digest(TOKEN)) == 1
    await cache.find(token_digest("qfwk_unknown_49"))  # among the newest: still kept
    await cache.find(token_digest("qfwk_unknown_0"))  # pushed out: asked again
    assert lookups.asked.count(token_digest("qfwk_unknown_49")) == 1
    assert lookups.asked.count(token_digest("qfwk_unknown_0")) == 2


async def test_forgetting_everything_drops_the_kept_misses_too(monkeypatch):
    _clock(monkeypatch)
    lookups = Lookups()
    cache = WorkerKeyCache(lookups, lambda: True)
    await cache.find(token_digest(TOKEN))
    cache.forget("")
    await cache.find(token_digest(TOKEN))
    assert len(lookups.asked) == 2


async def test_a_source_past_its_rate_of_unknown_keys_is_429_without_a_query(monkeypatch):
    clock = _clock(monkeypatch)
    lookups = Lookups()
    cache = WorkerKeyCache(lookups, lambda: True, RateTable(rate=0.5, burst=3))
    for n in range(3):
        assert await cache.find(token_digest(f"qfwk_guess_{n}"), "203.0.113.9") is None
    with pytest.raises(TooManyRequests) as refused:
        await cache.find(token_digest("qfwk_guess_3"), "203.0.113.9")
    assert refused.value.retry_after == 2  # one token at 0.5 a second
    assert len(lookups.asked) == 3
    # A kept miss costs nothing, so it is answered (401) whatever the bucket holds.
    assert await cache.find(token_digest("qfwk_guess_0"), "203.0.113.9") is None
    # Another address has its own bucket; this one's refills at the rate.
    assert await cache.find(token_digest("qfwk_guess_4"), "198.51.100.1") is None
    clock[0] += 2.0
    assert await cache.find(token_digest("qfwk_guess_5"), "203.0.113.9") is None
    assert len(lookups.asked) == 5


async def test_lookups_of_keys_that_exist_spend_nothing(monkeypatch):
    _clock(monkeypatch)
    keys = {f"qfwk_real_{n}": grant() for n in range(10)}
    lookups = Lookups(**keys)
    cache = WorkerKeyCache(lookups, lambda: True, RateTable(rate=0.001, burst=1))
    for token, key in keys.items():  # ten new keys from one address, the bucket holding one token
        assert await cache.find(token_digest(token), "203.0.113.9") == key
    assert await cache.find(token_digest("qfwk_guess"), "203.0.113.9") is None
    with pytest.raises(TooManyRequests):
        await cache.find(token_digest("qfwk_guess_2"), "203.0.113.9")


async def test_a_failed_lookup_spends_nothing(monkeypatch):
    _clock(monkeypatch)

    async def down(_digest: bytes) -> WorkerGrant | None:
        raise ConnectionError("database unreachable")

    cache = WorkerKeyCache(down, lambda: True, RateTable(rate=0.001, burst=1))
    for _ in range(3):
        with pytest.raises(ConnectionError):
            await cache.find(token_digest(TOKEN), "203.0.113.9")


async def test_the_authenticator_passes_the_source_on_both_kinds_of_route(monkeypatch):
    _clock(monkeypatch)
    lookups = Lookups()
    auth_ = authenticator(lookups)
    assert auth_.worker_keys is not None
    auth_.worker_keys._misses = RateTable(rate=0.001, burst=1)
    with pytest.raises(Unauthorized):
        await auth_.tenant("Bearer qfwk_a", "203.0.113.9")
    with pytest.raises(TooManyRequests):
        await auth_.worker("Bearer qfwk_b", "203.0.113.9")
    with pytest.raises(TooManyRequests):
        await auth_.tenant("Bearer qfwk_c", "203.0.113.9")
    assert await auth_.worker("Bearer wtok", "203.0.113.9") is None  # no lookup, no limit
    assert (await auth_.tenant("Bearer key1", "203.0.113.9")).id == "acme"
