"""Entry points of `envace sweep run CONFIG` and `envace sweep schedule CONFIG --cron "…"`.

`schedule_sweep` serves the ablation flow as a deployment with a cron schedule (`flow.to_deployment`
+ `prefect.serve`, which blocks) on the Prefect server named by PREFECT_API_URL: its runs appear in the
Prefect UI and can also be started on demand (`prefect deployment run 'ablation-sweep/<name>'`).
Prefect's ephemeral mode has no scheduler service (a served cron schedule would never fire there), so
without PREFECT_API_URL the same process waits for each cron time itself and runs the flow then, on
the ephemeral server, until stopped (Ctrl-C).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from envace.config import ConfigError, load_config
from envace.sweeps.grid import SweepConfig, slugify
from envace.sweeps.schedule import next_fire_times, validate_cron
from envace_flows.ablation import ablation_sweep

log = logging.getLogger("envace.flows.sweep")


def _config_path(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"sweep config {p} does not exist; pass a YAML like configs/sweeps/example_two_cell.yaml")
    return p.resolve()


def run_sweep_from_file(path: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Run the sweep at `path` now (ephemeral Prefect unless PREFECT_API_URL is set); returns its summary:
    cells {name: completed|cached|failed}, executed, cached, failed {name: error}, parent_run_id, table."""
    p = _config_path(path)
    load_config(SweepConfig, p, list(overrides))  # fail before starting Prefect on a bad file
    return ablation_sweep(str(p), list(overrides))


def prefect_api_url() -> str | None:
    from prefect.settings import get_current_settings

    return get_current_settings().api.url


def sweep_deployment(path: str | Path, cron: str, name: str | None = None, timezone: str = "UTC",
                     overrides: Sequence[str] = ()):
    """The RunnerDeployment of a scheduled sweep (what `schedule_sweep` serves)."""
    from prefect.schedules import Cron

    p = _config_path(path)
    cfg = load_config(SweepConfig, p, list(overrides))
    validate_cron(cron, timezone)
    return ablation_sweep.to_deployment(
        name=name or f"{slugify(cfg.name)}-cron", schedule=Cron(cron, timezone=timezone),
        parameters={"config": str(p), "overrides": list(overrides)}, tags=["envace", "sweep"],
        description=f"sweep {cfg.name} ({p.name}) on cron '{cron}' {timezone}")


def schedule_sweep(path: str | Path, cron: str, name: str | None = None, timezone: str = "UTC",
                   overrides: Sequence[str] = (), max_runs: int | None = None,
                   sleep: Callable[[float], None] = time.sleep) -> None:
    """Run the sweep on a cron schedule (blocks). With a Prefect server: `serve` a deployment (at most
    one run at a time). Without one: wait for each cron time in this process (`max_runs` bounds it)."""
    deployment = sweep_deployment(path, cron, name, timezone, overrides)
    if prefect_api_url():
        from prefect import serve

        serve(deployment, limit=1)
        return
    log.warning("PREFECT_API_URL is not set: Prefect's ephemeral mode has no scheduler, so this process runs "
                "the sweep at each cron time itself. For the UI and on-demand runs start `prefect server start` "
                "and export PREFECT_API_URL=http://127.0.0.1:4200/api")
    runs = 0
    while max_runs is None or runs < max_runs:
        now = dt.datetime.now(dt.UTC)
        nxt = next_fire_times(cron, now, 1, timezone)[0]
        log.info("sweep %s: next run at %s", path, nxt.isoformat())
        sleep(max(0.0, (nxt - now).total_seconds()))
        try:
            run_sweep_from_file(path, overrides)
        except Exception:  # noqa: BLE001 - a failed run must not end the schedule
            log.exception("scheduled sweep %s failed; waiting for the next cron time", path)
        runs += 1
