"""`envace eval` with test-time rehearsal and tracking on: every committed execution is stored with mode
tts-commit and its N private rehearsals with mode tts-private, linked, for each of k attempts, which get
distinct seeds (the store's records of the run, read back with envace.store.tts_query)."""

from __future__ import annotations

import pytest

from envace.evaluation.config import EvalConfig
from envace.evaluation.run import run_eval
from envace.store.session import read_only_session
from envace.store.tts_query import list_tts_commits, tts_commit, tts_rehearsals


@pytest.fixture(scope="module")
def world_model_dir(tmp_path_factory):
    """A tiny random model whose tokenizer knows the tool world (its prompts then fit the context)."""
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    cfg = TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                          intermediate_size=128, vocab_size=700, seed=0)
    return init_tiny_model(world_corpus(120, seed=0), tmp_path_factory.mktemp("tiny") / "model", cfg)


def test_tts_eval_stores_commits_with_their_private_rehearsals(world_model_dir, tmp_path):
    store = tmp_path / "store.db"
    cfg = EvalConfig.model_validate({
        "model": str(world_model_dir), "n_tasks": 2, "k": 2, "seeds": [3], "fidelity": False, "device": "cpu",
        "threads": 1, "out_dir": str(tmp_path / "eval"),
        "tts": {"n": 2, "mode": "sequential", "assess_max_tokens": 6, "memory_max_tokens": 8,
                "transcript_max_chars": 200},
        "rollout": {"max_assistant_turns": 2, "act": {"max_new_tokens": 10}, "rehearse": {"max_new_tokens": 10}},
        "tracking": {"enabled": True, "mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "store_url": str(store)}})
    res = run_eval(cfg)
    with read_only_session(store) as s:
        commits = list_tts_commits(s, res["store_run_id"])
        assert [(c["step"], c["attempt"], c["n"], c["tts_mode"], c["n_private"]) for c in commits] == \
            [(3, a, 2, "sequential", 2) for _ in range(2) for a in range(2)]
        seeds = [(c["prompt_id"], tts_commit(s, c["trajectory_id"]).seed) for c in commits]
        for task in {p for p, _ in seeds}:  # each attempt at a task has its own seed
            assert len({seed for p, seed in seeds if p == task}) == 2
        for c in commits:
            links = tts_rehearsals(s, c["trajectory_id"])
            assert [link.rehearsal_index for link in links] == [0, 1]
            assert len({link.seed for link in links}) == 2
