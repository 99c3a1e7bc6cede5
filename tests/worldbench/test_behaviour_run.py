"""`envace worldbench score` with every behaviour metric on: recorded tool-world transitions, the tiny model as
the scored row and as the frozen Act checkpoint, two sampling seeds, a stand-in rubric judge on 127.0.0.1.
worldbench.json's `behaviour` section, the per-transition files and the MLflow metrics agree with each other and
with the metric functions run on their own; a missing or broken act_checkpoint is a one-line CLI error."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envace.engines.server import background_server
from envace.engines.slots import ModelSlot
from envace.worldbench.behaviour import flat
from envace.worldbench.behr import behaviour_steps, observation_text
from envace.worldbench.config import ScoreConfig
from envace.worldbench.records import Split, read_transitions, safe_name, write_transitions
from envace.worldbench.run import score

VERDICT = {"format": 5, "factuality": 2, "consistency": 3, "realism": 4, "quality": 1}


@pytest.fixture(scope="module")
def judge():
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> JSONResponse:
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": json.dumps(VERDICT)},
                                          "finish_reason": "stop"}], "usage": {}})

    with background_server(app) as url:
        yield url


@pytest.fixture(scope="module")
def data(world_transitions, tmp_path_factory):
    root = tmp_path_factory.mktemp("wb")
    for split in Split:
        write_transitions(root / "data" / "world" / f"{split.value}.jsonl",
                          [t for t in world_transitions if t.split is split])
    return root


def test_every_behaviour_metric_in_one_scoring(data, world_tiny_dir, judge):
    cfg = ScoreConfig(data=str(data / "data"), out=str(data / "out"), bootstrap=100, max_new_tokens=24,
                      model=ModelSlot.local(world_tiny_dir, temperature=1.0), act_checkpoint=str(world_tiny_dir),
                      behr=True, env_nll=True, wm2real=True, wm2real_tasks=2, seeds=[0, 1],
                      judge=ModelSlot.endpoint(f"{judge}/v1", "judge", max_retries=0))
    res = score(cfg)
    b = json.loads((data / "out" / "worldbench.json").read_text())["behaviour"]
    rows = set(res["rows"])
    model = next(r for r in rows if r.startswith("model:"))
    assert set(b["behr"]) == rows and set(b["rubric"]) == rows
    assert b["behr"][model]["seeds"] == [0, 1] and b["behr"]["copy_last"]["seeds"] == [0]
    tests = read_transitions(data / "data" / "world" / "test.jsonl")
    steps, skipped = behaviour_steps(tests)
    assert b["behr"][model]["n_steps"] == len(steps) and b["behr"][model]["skipped"] == {**skipped, "too_long": 0}
    # seed 0's BehR predictions are the row's own scored predictions, shown to Act as the rollout shows them
    scored = {x["id"]: x for x in map(json.loads, open(res["rows"][model]["scores_file"]))}
    for line in map(json.loads, open(b["behr"][model]["file"])):
        assert line["predicted_obs"][0] == observation_text(scored[line["id"]]["predicted_text"])
        assert line["delta"] == [line["logp_real"] - x for x in line["logp_pred"]]
    assert b["env_nll"]["n"] == len(tests) and b["env_nll"]["forward_rows"] == len(tests)
    w = b["wm2real"]
    assert w["row"] == model and w["summary"]["tasks"] == 2 and w["summary"]["episodes"] == 4
    assert w["refused"] == {}  # only the tool world was scored
    assert b["rubric"]["copy_last"]["all"]["quality"]["mean"] == 0.0
    assert b["rubric"]["copy_last"]["all"]["realism"]["mean"] == 0.75
    import mlflow

    run = mlflow.tracking.MlflowClient(f"sqlite:///{data / 'out' / 'mlflow.db'}").get_run(res["mlflow_run_id"])
    expected = flat(b)
    assert {k: run.data.metrics[k] for k in expected} == pytest.approx(expected)
    key = safe_name(model)
    assert f"{key}/all/behr_delta_seed_lo" in expected and "act_policy/world/env_nll" in expected
    assert f"{key}/world/wm2real_success_agree" in expected and "copy_last/all/rubric_format" in expected


def _cli_error(*args: str, cwd) -> str:
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ENVACE_DEBUG", None)
    res = subprocess.run([sys.executable, "-m", "envace.cli", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=600)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-2000:]
    return lines[0]


def test_behaviour_metrics_without_a_usable_checkpoint_are_one_line_errors(data):
    line = _cli_error("worldbench", "score", f"data={data / 'data'}", "behr=true", "env_nll=true", cwd=data)
    assert "behr=true, env_nll=true needs act_checkpoint" in line
    line = _cli_error("worldbench", "score", f"data={data / 'data'}", f"out={data / 'o2'}", "wm2real=true",
                      f"act_checkpoint={data / 'no_model'}", "tracking.enabled=false", cwd=data)
    assert "act_checkpoint" in line and "no_model" in line
