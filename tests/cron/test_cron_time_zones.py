"""Cron schedules read in a time zone (issue 15), across both daylight-saving changes of
Europe/Berlin and America/New_York, on a controlled clock: `next_after` takes the reference instant,
so every firing is computed from a stated "now", never from the machine's.

The rules: a local time that does not exist (the clocks jump over it) fires once, at the first
instant after the jump; a local time that occurs twice (the clocks fall back over it) fires once, at
its first occurrence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.domain.cron import local_time, next_after
from tests.support.api import database_of, janitor_of

AUTH = {"Authorization": "Bearer dev"}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def firings(expr: str, zone: str | None, start: str, end: str) -> list[datetime]:
    """Every firing in [start, end), from a clock that starts at `start`."""
    out: list[datetime] = []
    at = utc(start) - timedelta(microseconds=1)
    while True:
        nxt = next_after(expr, at, zone)
        assert nxt is not None
        if nxt >= utc(end):
            return out
        out.append(nxt)
        at = nxt  # the scheduler's next reference is the firing it just did


# --- Europe/Berlin: CET (+01) -> CEST (+02) on 2026-03-29 at 02:00 local (01:00 UTC); back on
# 2026-10-25 at 03:00 CEST (01:00 UTC), so 02:00-02:59 local occurs twice. -------------------------


def test_berlin_a_daily_time_in_the_spring_gap_fires_once_at_the_jump():
    got = firings("30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00", "2026-03-31T00:00:00")
    assert got == [
        utc("2026-03-28T01:30:00"),  # 02:30 CET
        utc("2026-03-29T01:00:00"),  # 02:30 does not exist: 03:00 CEST, the first valid instant
        utc("2026-03-30T00:30:00"),  # 02:30 CEST
    ]


def test_berlin_a_daily_time_in_the_repeated_hour_fires_once_at_its_first_occurrence():
    got = firings("30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00", "2026-10-27T00:00:00")
    assert got == [
        utc("2026-10-24T00:30:00"),  # 02:30 CEST
        utc("2026-10-25T00:30:00"),  # the first 02:30 (CEST); the second (01:30 UTC, CET) is skipped
        utc("2026-10-26T01:30:00"),  # 02:30 CET
    ]


def test_berlin_every_half_hour_through_both_changes():
    spring = firings("*/30 * * * *", "Europe/Berlin", "2026-03-29T00:00:00", "2026-03-29T02:00:00")
    # 01:00 CET, 01:30 CET, then 02:00, 02:30 and 03:00 local all name the jump (03:00 CEST), once.
    assert spring == [
        utc("2026-03-29T00:00:00"),
        utc("2026-03-29T00:30:00"),
        utc("2026-03-29T01:00:00"),
        utc("2026-03-29T01:30:00"),
    ]
    autumn = firings("*/30 * * * *", "Europe/Berlin", "2026-10-24T23:30:00", "2026-10-25T03:00:00")
    # Local 01:30, 02:00, 02:30 (CEST), then the wall clock repeats 02:00-02:59: skipped, then 03:00 CET.
    assert autumn == [
        utc("2026-10-24T23:30:00"),
        utc("2026-10-25T00:00:00"),
        utc("2026-10-25T00:30:00"),
        utc("2026-10-25T02:00:00"),
        utc("2026-10-25T02:30:00"),
    ]
    assert len(set(spring)) == len(spring) and len(set(autumn)) == len(autumn)


def test_berlin_weekdays_at_nine_follow_the_wall_clock_across_the_change():
    got = firings("0 9 * * 1-5", "Europe/Berlin", "2026-03-26T00:00:00", "2026-04-01T00:00:00")
    assert got == [
        utc("2026-03-26T08:00:00"),  # Thursday, CET
        utc("2026-03-27T08:00:00"),  # Friday
        utc("2026-03-30T07:00:00"),  # Monday, CEST: an hour earlier in UTC
        utc("2026-03-31T07:00:00"),
    ]


# --- America/New_York: EST (-05) -> EDT (-04) on 2026-03-08 at 02:00 local (07:00 UTC); back on
# 2026-11-01 at 02:00 EDT (06:00 UTC), so 01:00-01:59 local occurs twice. --------------------------


def test_new_york_a_time_in_the_spring_gap_fires_once_at_the_jump():
    got = firings("30 2 * * *", "America/New_York", "2026-03-07T00:00:00", "2026-03-10T00:00:00")
    assert got == [utc("2026-03-07T07:30:00"), utc("2026-03-08T07:00:00"), utc("2026-03-09T06:30:00")]


def test_new_york_a_time_in_the_repeated_hour_fires_once():
    got = firings("30 1 * * *", "America/New_York", "2026-10-31T00:00:00", "2026-11-03T00:00:00")
    assert got == [utc("2026-10-31T05:30:00"), utc("2026-11-01T05:30:00"), utc("2026-11-02T06:30:00")]


def test_new_york_seconds_fields_in_the_repeated_hour():
    # Every 20 s at 01:30 local: three firings on the first pass, none on the second.
    got = firings("*/20 30 1 * * *", "America/New_York", "2026-11-01T05:00:00", "2026-11-01T07:00:00")
    assert got == [utc("2026-11-01T05:30:00"), utc("2026-11-01T05:30:20"), utc("2026-11-01T05:30:40")]


def test_no_zone_is_utc_and_the_local_time_shows_the_offset():
    assert next_after("0 9 * * *", utc("2026-03-29T00:00:00")) == utc("2026-03-29T09:00:00")
    assert next_after("0 9 * * *", utc("2026-03-29T00:00:00"), "UTC") == utc("2026-03-29T09:00:00")
    assert local_time(utc("2026-03-29T01:00:00"), "Europe/Berlin") == "2026-03-29T03:00:00+02:00"
    assert local_time(utc("2026-11-01T06:30:00"), "America/New_York") == "2026-11-01T01:30:00-05:00"


# --- the API ----------------------------------------------------------------------------------------


async def test_a_schedule_with_a_zone_shows_its_next_firing_in_it_and_fires_by_it(api):
    client = await api()
    resp = await client.post(
        "/api/v1/cron",
        json={"name": "report", "cron_expr": "0 9 * * *", "task_name": "echo", "timezone": "Europe/Berlin"},
        headers=AUTH,
    )
    assert resp.status == 201, await resp.text()
    cron_id = (await resp.json())["cron_id"]
    got = await (await client.get(f"/api/v1/cron/{cron_id}", headers=AUTH)).json()
    assert got["timezone"] == "Europe/Berlin"
    local = datetime.fromisoformat(got["next_run_local"])
    assert (local.hour, local.minute) == (9, 0)
    assert local == datetime.fromisoformat(got["next_run_at"].replace("Z", "+00:00"))
    listed = await (await client.get("/api/v1/cron", headers=AUTH)).json()
    assert listed["crons"][0]["next_run_local"] == got["next_run_local"]

    # Fire it (its alarm moved into the past), then the next alarm is again 09:00 Berlin time.
    pool = database_of(client).pool
    await pool.execute("UPDATE queueflow.cron_schedules SET next_run_at = now() - interval '1 second'")
    assert await janitor_of(client).fire_crons() == 1
    assert await pool.fetchval("SELECT count(*) FROM queueflow.jobs WHERE task_name = 'echo'") == 1
    after = await (await client.get(f"/api/v1/cron/{cron_id}", headers=AUTH)).json()
    local = datetime.fromisoformat(after["next_run_local"])
    assert (local.hour, local.minute) == (9, 0)
    assert datetime.fromisoformat(after["next_run_at"].replace("Z", "+00:00")) > datetime.now(UTC)


async def test_a_schedule_without_a_zone_keeps_the_upstream_shape(api):
    client = await api()
    resp = await client.post(
        "/api/v1/cron", json={"name": "n", "cron_expr": "0 9 * * *", "task_name": "echo"}, headers=AUTH
    )
    cron_id = (await resp.json())["cron_id"]
    got = await (await client.get(f"/api/v1/cron/{cron_id}", headers=AUTH)).json()
    assert "timezone" not in got and "next_run_local" not in got


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "Europe/", "../etc/passwd", "x" * 65, 5, "CEST+2"])
async def test_an_unknown_time_zone_is_a_400_with_the_error_body(api, zone):
    client = await api()
    resp = await client.post(
        "/api/v1/cron",
        json={"name": "z", "cron_expr": "0 9 * * *", "task_name": "echo", "timezone": zone},
        headers=AUTH,
    )
    assert resp.status == 400, await resp.text()
    assert (await resp.json())["error"]
