"""Cron times of the server-less scheduler, on hand-worked dates."""

from __future__ import annotations

import datetime as dt

import pytest

from envace.config import ConfigError
from envace.sweeps.schedule import next_fire_times, validate_cron

UTC = dt.UTC


def test_daily_cron_fires_at_the_next_03_00():
    got = next_fire_times("0 3 * * *", dt.datetime(2026, 1, 1, 2, 59, 59, tzinfo=UTC), n=2)
    assert got == [dt.datetime(2026, 1, 1, 3, 0, tzinfo=UTC), dt.datetime(2026, 1, 2, 3, 0, tzinfo=UTC)]


def test_a_fire_time_equal_to_now_is_not_repeated():
    got = next_fire_times("0 3 * * *", dt.datetime(2026, 1, 1, 3, 0, tzinfo=UTC))
    assert got == [dt.datetime(2026, 1, 2, 3, 0, tzinfo=UTC)]


def test_every_15_minutes_and_weekdays():
    got = next_fire_times("*/15 * * * *", dt.datetime(2026, 1, 1, 3, 7, tzinfo=UTC), n=3)
    assert [d.minute for d in got] == [15, 30, 45]
    # 2026-01-02 is a Friday; "Mondays at 09:00" is next on 2026-01-05
    assert next_fire_times("0 9 * * 1", dt.datetime(2026, 1, 2, 12, 0, tzinfo=UTC)) == [
        dt.datetime(2026, 1, 5, 9, 0, tzinfo=UTC)]


def test_timezone_of_the_schedule_is_honoured():
    # 03:00 in Europe/Paris is 02:00 UTC in winter
    got = next_fire_times("0 3 * * *", dt.datetime(2026, 1, 1, 0, 0, tzinfo=UTC), timezone="Europe/Paris")
    assert got[0].astimezone(UTC) == dt.datetime(2026, 1, 1, 2, 0, tzinfo=UTC)


def test_bad_cron_and_naive_times_are_refused():
    with pytest.raises(ConfigError, match="cron 'every day'"):
        validate_cron("every day")
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fire_times("0 3 * * *", dt.datetime(2026, 1, 1))
