"""The TTS sweep report (envace.sweeps.tts_report) on a hand-written long table: N=0 becomes every mode's
first point, the Markdown table holds mean ± CI per (model, mode) and N, the plot has one line per
(model, mode)."""

from __future__ import annotations

import pandas as pd

from envace.sweeps.results import summarize
from envace.sweeps.tts_report import tts_figure, tts_markdown, tts_rows, write_tts_report

M = "eval/world/success"
# (model, N, mode): per-seed successes
CELLS = {("base", 0, "parallel"): [0.2, 0.4], ("base", 1, "parallel"): [0.3, 0.5],
         ("base", 1, "sequential"): [0.5, 0.5], ("rl", 0, "parallel"): [0.6, 0.6],
         ("rl", 1, "parallel"): [0.7, 0.9], ("rl", 1, "sequential"): [0.8, 0.8]}


def table() -> pd.DataFrame:
    records = [{"group": f"{m}-{n}-{mode}", "levels": {"model": m, "tts.n": n, "tts.mode": mode}, "seed": s,
                "metrics": {M: v}} for (m, n, mode), vals in CELLS.items() for s, v in enumerate(vals)]
    return summarize(records, ["model", "tts.n", "tts.mode"], [M])


def test_rows_spread_the_plain_run_over_the_modes():
    rows = tts_rows(table())
    assert [(r.model, r.mode, r.N) for r in rows.itertuples()] == [
        ("base", "parallel", 0), ("base", "parallel", 1), ("base", "sequential", 0), ("base", "sequential", 1),
        ("rl", "parallel", 0), ("rl", "parallel", 1), ("rl", "sequential", 0), ("rl", "sequential", 1)]
    # by hand: mean of the seeds; two seeds: half-width 12.7062 * |a - b| / 2
    got = {(r.model, r.mode, r.N): (r.mean, r.ci95) for r in rows.itertuples()}
    assert got[("base", "sequential", 0)] == got[("base", "parallel", 0)]
    assert abs(got[("base", "parallel", 0)][0] - 0.3) < 1e-12
    assert abs(got[("base", "parallel", 1)][1] - 12.7062 * 0.2 / 2) < 1e-3
    assert got[("rl", "sequential", 1)][0] == 0.8


def test_markdown_and_plot(tmp_path):
    rows = tts_rows(table())
    md = tts_markdown(rows)
    assert md.splitlines()[0] == "| model | mode | N=0 | N=1 |"
    assert "| rl | sequential | 0.600 ± 0.000 | 0.800 ± 0.000 |" in md
    fig = tts_figure(rows)
    assert sorted(t.name for t in fig.data) == ["base · parallel", "base · sequential", "rl · parallel",
                                                "rl · sequential"]
    assert list(fig.data[0].x) == [0, 1]
    paths = write_tts_report(tmp_path, table())
    assert all(p.is_file() for p in paths.values())


def test_a_model_list_is_a_model_axis_and_n0_runs_once_per_model():
    from envace.sweeps.grid import expand_cells, tts_sweep_config

    cfg = tts_sweep_config(["runs/sft/model", "runs/rl/final"], "/tmp/t", n_values=[0, 1], seeds=[0, 1, 2])
    cells = expand_cells(cfg)
    groups = list(dict.fromkeys(c.group for c in cells))
    assert groups == [f"model={m},tts.n={n},tts.mode={mode}" for m in ("runs/sft/model", "runs/rl/final")
                      for n, mode in ((0, "parallel"), (1, "parallel"), (1, "sequential"))]
    assert len(cells) == 6 * 3 and not any(o.startswith("model=") for o in cfg.overrides)
