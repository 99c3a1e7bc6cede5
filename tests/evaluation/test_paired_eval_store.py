"""The demo's paired evaluations (`envace.evaluation.paired.score_tasks`) written to the store through
`store_paired_eval`: the episodes it scored are the stored ones (same rewards, same keys), one run per
(model, temperature), FINISHED; the same evaluation again adds no row; a failure ends the run FAILED."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from envace.evaluation.config import EvalConfig
from envace.evaluation.eval_store import store_paired_eval
from envace.evaluation.paired import score_tasks


@pytest.fixture(scope="module")
def world_model_dir(tmp_path_factory):
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    cfg = TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                          intermediate_size=128, vocab_size=700, seed=0)
    return init_tiny_model(world_corpus(120, seed=0), tmp_path_factory.mktemp("tiny") / "model", cfg)


def test_paired_scores_are_the_stored_episodes_and_a_rerun_adds_none(world_model_dir, tmp_path):
    import torch

    from envace.data.tasks import load_tasks
    from envace.engines.factory import make_engine
    from envace.models.loading import load_policy

    torch.set_num_threads(1)
    store = tmp_path / "store.db"
    ecfg = EvalConfig.model_validate({"model": str(world_model_dir), "n_tasks": 3, "device": "cpu",
                                      "rollout": {"max_assistant_turns": 2, "act": {"max_new_tokens": 12},
                                                  "rehearse": {"max_new_tokens": 12}}})
    model, tok = load_policy(world_model_dir, device=torch.device("cpu"))
    engine = make_engine(model, tok)
    tasks = load_tasks(ecfg.data, split="test", n=3)

    def scored(temperature: float, seeds: list[int]):
        with store_paired_eval(store, world_model_dir, ecfg, temperature=temperature,
                               name=f"demo-t{temperature}") as put:
            return score_tasks(engine, tasks, seeds=seeds, temperature=temperature, rollout=ecfg.rollout,
                               on_trajectories=put)

    greedy, sampled = scored(0.0, [0]), scored(1.0, [0, 1])
    eng = sa.create_engine(f"sqlite:///{store}")

    def rows():
        with eng.connect() as c:
            return c.execute(sa.text(
                "SELECT r.name, r.status, t.step, t.split, t.prompt_index, t.sample_index, t.reward, t.benchmark "
                "FROM trajectories t JOIN runs r ON r.id = t.run_id ORDER BY r.name, t.step, t.prompt_index")).all()

    first = rows()
    assert {(r.name, r.status) for r in first} == {("demo-t0.0", "finished"), ("demo-t1.0", "finished")}
    assert {r.benchmark for r in first} == {""} and {r.split for r in first} == {"test"}
    for name, scores, seeds in (("demo-t0.0", greedy, [0]), ("demo-t1.0", sampled, [0, 1])):
        mine = [r for r in first if r.name == name]
        assert sorted((r.step, r.prompt_index) for r in mine) == sorted((s, p) for s in seeds for p in range(3))
        for r in mine:  # the stored reward is the one the paired comparison used
            assert r.reward == pytest.approx(scores.reward[r.prompt_index, seeds.index(r.step)])
    scored(0.0, [0])  # the same checkpoint, protocol and seed again
    assert rows() == first

    with pytest.raises(RuntimeError, match="stop"):
        with store_paired_eval(store, world_model_dir, ecfg, temperature=0.5, name="demo-broken"):
            raise RuntimeError("stop")
    with eng.connect() as c:
        assert c.execute(sa.text("SELECT status FROM runs WHERE name = 'demo-broken'")).scalar_one() == "failed"
    eng.dispose()
