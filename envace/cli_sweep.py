"""`envace sweep`: run, preview, export, analyse and schedule ablation sweeps. Thin wrappers like the rest
of the CLI (envace/cli.py): each builds a validated config or path and calls one library function; heavy
imports happen inside the commands. `run` and `schedule` need the flows extra (Prefect); `run --dry-run`,
`export` and `analyze` run on the core install."""

from __future__ import annotations

import json
from pathlib import Path

import typer

sweep_app = typer.Typer(help="Ablation and test-time-rehearsal sweeps (Prefect).", no_args_is_help=True)


def _require_flows(command: str) -> None:
    """The flows extra's packages a sweep uses (Prefect; plotly for its report), checked before it starts
    rather than when a cell or the report first imports them."""
    from envace.extras import check

    for module in ("prefect", "plotly"):
        check(module, "flows", f"`{command}`")


@sweep_app.command("run")
def sweep_run(config: Path, dry_run: bool = typer.Option(
        False, "--dry-run", help="Check the sweep's size and every cell's config, print the cells; run nothing.")):
    """Run an ablation / TTS sweep now (Prefect flow)."""
    if dry_run:
        from envace.cli_errors import existing_path
        from envace.config import load_config
        from envace.sweeps.grid import SweepConfig
        from envace.sweeps.preflight import dry_run as sweep_dry_run

        typer.echo(json.dumps(sweep_dry_run(load_config(SweepConfig, existing_path(
            config, "CONFIG", "pass a sweep YAML like configs/sweeps/example_two_cell.yaml"))), indent=2))
        return
    _require_flows("envace sweep run")
    from envace_flows.sweep import run_sweep_from_file

    summary = run_sweep_from_file(config)
    typer.echo(json.dumps(summary, indent=2, default=str))
    if summary.get("failed"):  # a sweep with failed cells is a failed command (its MLflow parent run is FAILED)
        typer.secho(f"error: {len(summary['failed'])} of {len(summary['cells'])} sweep cells failed "
                    f"({', '.join(sorted(summary['failed']))}): see 'failed' above; fix them and run "
                    f"`envace sweep run {config}` again (finished cells are cached)", fg=typer.colors.RED, err=True)
        raise typer.Exit(1)


@sweep_app.command("export")
def sweep_export(sweep_out_dir: Path, dest: Path):
    """Write a finished sweep's per-episode outcomes (outcomes.csv.gz) and per-cell metrics (cells.csv) to DEST."""
    from envace.sweeps.outcomes import export_outcomes

    paths = export_outcomes(sweep_out_dir, dest)
    typer.echo(json.dumps({name: str(p) for name, p in paths.items()}, indent=2))


@sweep_app.command("analyze")
def sweep_analyze(dest: Path, n_boot: int = typer.Option(10_000, help="Bootstrap resamples per interval.")):
    """Recompute a sweep's report (report.md, paired.csv) from the files `envace sweep export` wrote to DEST."""
    from envace.sweeps.outcomes import analyze

    out = analyze(dest, n_boot=n_boot)
    typer.echo(out["markdown"])
    typer.echo(f"analyzed in {out['wall_s']:.1f} s; wrote {out['paths']['report.md']} and {out['paths']['paired.csv']}")


@sweep_app.command("schedule")
def sweep_schedule(config: Path, cron: str = typer.Option(..., help="Cron expression, e.g. '0 3 * * *'.")):
    """Serve the sweep as a Prefect deployment on a cron schedule."""
    _require_flows("envace sweep schedule")
    from envace_flows.sweep import schedule_sweep

    schedule_sweep(config, cron)
