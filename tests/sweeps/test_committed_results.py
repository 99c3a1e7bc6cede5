"""The committed sweep results re-analyse to the committed report: `results/*/` holds each sweep's per-task
outcomes (outcomes.csv.gz), its cells and contrasts, and the report made from them; `envace sweep analyze`
on a copy of those files alone must write the same report.md and paired.csv, byte for byte."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envace.sweeps.outcomes import analyze

RESULTS = Path(__file__).resolve().parents[2] / "results"
SWEEPS = sorted(p.parent for p in RESULTS.glob("*/outcomes.csv.gz"))


def test_results_are_committed():
    assert SWEEPS, f"no results/*/outcomes.csv.gz under {RESULTS}"


@pytest.mark.slow
@pytest.mark.parametrize("sweep", SWEEPS, ids=[p.name for p in SWEEPS])
def test_committed_outcomes_reproduce_the_committed_report(sweep, tmp_path):
    copy = tmp_path / sweep.name
    copy.mkdir()
    for name in ("outcomes.csv.gz", "cells.csv", "contrasts.csv"):
        if (sweep / name).is_file():
            shutil.copy(sweep / name, copy / name)
    analyze(copy)
    for name in ("report.md", "paired.csv"):
        assert (copy / name).read_text() == (sweep / name).read_text(), f"{sweep / name} differs from a re-analysis"
