"""A sweep's outcomes exported to compact files and the report recomputed from them alone: the same paired
table as `paired_report` on the sweep's own records, after the sweep folder has moved."""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pandas as pd
import pytest

from envace.sweeps.fidelity_seeds import fidelity_report
from envace.sweeps.outcomes import analyze, export_outcomes, write_records
from envace.sweeps.paired_report import paired_report

TASKS = ["w0", "w1", "w2"]


def _eval_file(path, seed, success, reward, k):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"world": {"temperature": 1.0 if k > 1 else 0.0, "success": float(np.mean(success)),
                                          "per_task": {"task_ids": TASKS, "seeds": [seed], "k": k,
                                                       "success": success, "reward": reward}}}))
    return str(path)


def _sweep(root):
    """Two SFT starts x 3 seeds of a base row and two arms, passes `default` (k=1) and `t1_k2` (k=2)."""
    rng = np.random.default_rng(0)
    records = []
    for group, kind, p in (("variant=base", "eval", 0.3), ("variant=envace", "train", 0.6),
                           ("variant=grpo", "train", 0.5)):
        for start in (0, 1):
            for seed in (0, 1, 2):
                cell = root / "cells" / f"{group}-{start}-{seed}"
                files = {}
                for name, k in (("default", 1), ("t1_k2", 2)):
                    success = (rng.random((3, k)) < p).astype(float).tolist()
                    reward = np.round(rng.random((3, k)), 6).tolist()
                    files[name] = _eval_file(cell / "eval" / f"{name}.json", seed, success, reward, k)
                records.append({"cell": f"{group},sft_seed={start},seed={seed}", "group": group, "seed": seed,
                                "sft_seed": start, "kind": kind, "levels": {"variant": group.split("=")[1]},
                                "start_model": f"runs/sft/seed_{start}/model", "eval_file": files["default"],
                                "eval_files": files, "mlflow_run_id": None,
                                "metrics": {"eval/world/success": float(seed + start) / 10, "train/steps": 4.0}})
    return records


def test_export_then_analyze_gives_the_records_table(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    records = _sweep(sweep)
    write_records(sweep / "results", records, out_dir=sweep, contrasts=[("variant=envace", "variant=grpo")])
    want = paired_report(records, contrasts=[("variant=envace", "variant=grpo")], n_boot=300)
    moved = tmp_path / "moved"
    shutil.move(sweep, moved)  # the recorded paths no longer exist: the export re-roots them
    dest = tmp_path / "committed"
    paths = export_outcomes(moved, dest)
    assert sorted(p.name for p in paths.values()) == ["cells.csv", "contrasts.csv", "outcomes.csv.gz"]
    outcomes = pd.read_csv(dest / "outcomes.csv.gz")
    assert len(outcomes) == 3 * 2 * 3 * 3 * (1 + 2)  # groups x starts x seeds x tasks x samples over both passes
    row = outcomes[(outcomes["group"] == "variant=envace") & (outcomes["sft_seed"] == 1) & (outcomes["seed"] == 2)
                   & (outcomes["pass"] == "t1_k2") & (outcomes["task_id"] == "w1") & (outcomes["sample"] == 1)]
    source = json.loads((moved / "cells" / "variant=envace-1-2" / "eval" / "t1_k2.json").read_text())
    assert row["reward"].item() == source["world"]["per_task"]["reward"][1][1]
    assert row[["kind", "eval_seed", "episode"]].values.tolist() == [["train", 2, 1]]
    # the start model as the records name it, not resolved against this machine's working directory
    assert set(outcomes["start_model"]) == {"runs/sft/seed_0/model", "runs/sft/seed_1/model"}
    cells = pd.read_csv(dest / "cells.csv")
    assert list(cells.columns[:8]) == ["variant", "group", "seed", "cell", "mlflow_run_id", "kind", "sft_seed",
                                       "start_model"]
    assert len(cells) == 18
    again = export_outcomes(moved, tmp_path / "again")  # byte-identical: no timestamp in the gzip header
    assert again["outcomes.csv.gz"].read_bytes() == paths["outcomes.csv.gz"].read_bytes()
    assert gzip.decompress(paths["outcomes.csv.gz"].read_bytes()).startswith(b"group,kind,start_model")

    shutil.rmtree(moved)  # the analysis needs nothing but the exported files
    out = analyze(dest, n_boot=300)
    pd.testing.assert_frame_equal(out["table"], want)
    pd.testing.assert_frame_equal(pd.read_csv(dest / "paired.csv"), pd.read_csv(_csv(want, tmp_path)))
    assert set(out["table"]["pass"]) == {"default", "t1_k2"}
    assert "variant=envace − variant=grpo" in set(out["table"]["comparison"])
    assert (dest / "report.md").read_text() == out["markdown"]
    # per pass: 2 vs base, 1 vs reference, 1 contrast
    assert out["markdown"].count("Holm over the m = 4 comparisons") == 2 and "eval/world/success" in out["markdown"]


def _csv(table, tmp_path):
    path = tmp_path / "want.csv"
    table.to_csv(path, index=False)
    return path


def test_missing_inputs_name_the_file_and_the_fix(tmp_path):
    with pytest.raises(ValueError, match=r"records.json not found: `envace sweep run CONFIG`"):
        export_outcomes(tmp_path / "nowhere", tmp_path / "dest")
    with pytest.raises(ValueError, match=r"outcomes.csv.gz not found: write it with `envace sweep export"):
        analyze(tmp_path / "dest")
    dest = tmp_path / "bad"
    dest.mkdir()
    pd.DataFrame({"group": ["g"], "seed": [0]}).to_csv(dest / "outcomes.csv.gz", index=False, compression="gzip")
    pd.DataFrame({"group": ["g"], "seed": [0], "start_model": ["m"]}).to_csv(dest / "cells.csv", index=False)
    with pytest.raises(ValueError, match=r"outcomes.csv.gz: column\(s\) \['kind'"):
        analyze(dest)


def test_the_cli_exports_and_analyzes(tmp_path):
    from typer.testing import CliRunner

    from envace.cli import app

    sweep = tmp_path / "sweep"
    records = _sweep(sweep)
    write_records(sweep / "results", records, out_dir=sweep)
    dest = tmp_path / "dest"
    result = CliRunner().invoke(app, ["sweep", "export", str(sweep), str(dest)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["outcomes.csv.gz"] == str(dest / "outcomes.csv.gz")
    result = CliRunner().invoke(app, ["sweep", "analyze", str(dest), "--n-boot", "200"])
    assert result.exit_code == 0, result.output
    assert "analyzed in " in result.output and "#### pass `t1_k2`" in result.output
    want = paired_report(records, n_boot=200)
    pd.testing.assert_frame_equal(pd.read_csv(dest / "paired.csv"), pd.read_csv(_csv(want, tmp_path)))
    result = CliRunner().invoke(app, ["sweep", "analyze", str(tmp_path / "empty")])
    assert result.exit_code != 0 and "outcomes.csv.gz not found" in str(result.exception)


def test_analyze_adds_the_seed_level_fidelity_section_when_cells_hold_worldbench_metrics(tmp_path):
    sweep = tmp_path / "sweep"
    records = _sweep(sweep)
    for r in records:  # a fidelity reading per cell: the seed and the start set it, the arm shifts it
        shift = {"variant=base": 0.0, "variant=envace": 0.1, "variant=grpo": -0.05}[r["group"]]
        r["metrics"]["worldbench/all/leaf_f1"] = 0.2 + shift + 0.01 * r["seed"] * (1 + r["sft_seed"])
    write_records(sweep / "results", records, out_dir=sweep)
    dest = tmp_path / "committed"
    export_outcomes(sweep, dest)
    out = analyze(dest, n_boot=200)
    want = fidelity_report(records)[2]
    assert out["markdown"].endswith(f"## Fidelity at the seed level\n\n{want}\n")
    assert ("| variant=envace @ runs/sft/seed_1/model | 3 | +0.000 [+0.000, +0.000] 0/3 | +0.100 [+0.100, +0.100] 3/3 |"
            in want.splitlines())
    plain = tmp_path / "plain"
    export_outcomes(sweep, plain)
    cells = pd.read_csv(plain / "cells.csv").drop(columns=["worldbench/all/leaf_f1"])
    cells.to_csv(plain / "cells.csv", index=False)
    assert "Fidelity" not in analyze(plain, n_boot=200)["markdown"]  # no worldbench metric: no section
