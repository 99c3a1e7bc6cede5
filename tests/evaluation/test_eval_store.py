"""`envace eval` with tracking on writes its tool-world trajectories to the trajectory store: mode eval,
one step per evaluation seed, the fidelity pass under its own split, consistent with the eval's scores."""

from __future__ import annotations

import json
import statistics

import pytest
import sqlalchemy as sa
from mlflow.tracking import MlflowClient

from envace.evaluation.config import EvalConfig
from envace.evaluation.run import run_eval


@pytest.fixture(scope="module")
def world_model_dir(tmp_path_factory):
    """A tiny random model whose tokenizer knows the tool world (its prompts then fit the context)."""
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    cfg = TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                          intermediate_size=128, vocab_size=700, seed=0)
    return init_tiny_model(world_corpus(120, seed=0), tmp_path_factory.mktemp("tiny") / "model", cfg)


def test_eval_trajectories_are_stored_with_mode_eval(world_model_dir, tmp_path):
    mlflow_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store = tmp_path / "store.db"
    cfg = EvalConfig.model_validate({
        "model": str(world_model_dir), "n_tasks": 3, "k": 1, "seeds": [0, 5], "fidelity": True, "device": "cpu",
        "threads": 1, "out_dir": str(tmp_path / "eval"),
        "rollout": {"max_assistant_turns": 2, "act": {"max_new_tokens": 12}, "rehearse": {"max_new_tokens": 12}},
        "tracking": {"enabled": True, "mlflow_uri": mlflow_uri, "store_url": str(store)}})
    res = run_eval(cfg)
    run_id = res["store_run_id"]

    engine = sa.create_engine(f"sqlite:///{store}")
    with engine.connect() as c:
        run = c.execute(sa.text("SELECT kind, status, mlflow_run_id FROM runs WHERE id = :r"), {"r": run_id}).one()
        rows = c.execute(sa.text(
            "SELECT step, split, mode, rollout_mode, prompt_index, sample_index, reward, reward_breakdown, n_turns "
            "FROM trajectories WHERE run_id = :r"), {"r": run_id}).all()
        n_turns = c.execute(sa.text(
            "SELECT count(*) FROM turns JOIN trajectories t ON t.id = turns.trajectory_id WHERE t.run_id = :r"),
            {"r": run_id}).scalar_one()
    engine.dispose()

    assert tuple(run) == ("eval", "finished", res["mlflow_run_id"])
    keys = sorted((r.step, r.split, r.prompt_index, r.sample_index) for r in rows)
    assert keys == sorted((seed, split, p, 0)
                          for seed in (0, 5) for split in ("test", "test-fidelity") for p in range(3))
    assert {r.mode for r in rows} == {"eval"}
    assert {r.rollout_mode for r in rows if r.split == "test"} == {"env"}
    assert {r.rollout_mode for r in rows if r.split == "test-fidelity"} == {"rehearse"}
    assert n_turns >= sum(r.n_turns for r in rows) > 0  # generations plus the user-message rows
    world = res["world"]
    for i, seed in enumerate((0, 5)):  # the stored episodes are the ones the eval scored
        scored = [r for r in rows if r.step == seed and r.split == "test"]
        assert statistics.mean(r.reward for r in scored) == pytest.approx(world["reward_per_seed"][i])
        success = [json.loads(r.reward_breakdown)["success"] for r in scored]
        assert statistics.mean(success) == pytest.approx(world["success_per_seed"][i])
    tags = MlflowClient(mlflow_uri).get_run(res["mlflow_run_id"]).data.tags
    assert tags["envace.store_run_id"] == run_id
