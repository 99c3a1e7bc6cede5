"""Cron arithmetic for `envace sweep schedule` when no Prefect server is configured.

Prefect's ephemeral (serverless) mode has no scheduler service, so a `serve`d cron deployment never
fires there (Prefect itself warns "Cannot schedule flows on an ephemeral server"). In that mode the
sweep scheduler waits for the next cron time itself and runs the flow then; the cron grammar and time
zone handling are Prefect's own (`CronSchedule`), so a schedule means the same thing in both modes.
"""

from __future__ import annotations

import asyncio
import datetime as dt

from envace.config import ConfigError


def _schedule(cron: str, timezone: str):
    from envace.extras import require

    CronSchedule = require("prefect.server.schemas.schedules", "flows", "a cron schedule (`envace sweep schedule`)"
                           ).CronSchedule

    try:
        return CronSchedule(cron=cron, timezone=timezone)
    except ValueError as exc:
        raise ConfigError(f"cron {cron!r} (timezone {timezone!r}) is invalid: {exc}; "
                          f"write five fields, e.g. '0 3 * * *' for 03:00 every day") from None


def next_fire_times(cron: str, after: dt.datetime, n: int = 1, timezone: str = "UTC") -> list[dt.datetime]:
    """The next `n` times strictly after `after` (timezone-aware) at which `cron` fires."""
    if after.tzinfo is None:
        raise ValueError("`after` must be timezone-aware (e.g. datetime.now(timezone.utc))")
    sched = _schedule(cron, timezone)
    dates = asyncio.run(sched.get_dates(n=n + 1, start=after))  # "on or after": drop a date equal to `after`
    out = [dt.datetime.fromisoformat(d.isoformat()) for d in dates]
    return [d for d in out if d > after][:n]


def validate_cron(cron: str, timezone: str = "UTC") -> str:
    _schedule(cron, timezone)
    return cron
