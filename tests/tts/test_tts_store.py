"""Test-time rehearsal in the trajectory store: a committed execution written with its N private rehearsals
(through the real `TrajectoryWriter` on SQLite) and read back with the store's queries — the link, N,
mode, attempt, memory, reviews, and the real results of the committed calls — compared with the
in-memory records the rollout produced."""

from __future__ import annotations

from envace.config import RolloutConfig, SamplingConfig
from envace.store.models import TrajectoryMode
from envace.store.query import TrajectoryFilter, get_trajectory, list_trajectories
from envace.store.session import read_only_session
from envace.store.tts import put_tts
from envace.store.tts_query import commit_of, list_tts_commits, tts_commit, tts_rehearsals
from envace.store.writer import TrajectoryWriter
from envace.tts.config import TTSConfig
from envace.tts.prompts import ASSESS_MARK, MEMORY_MARK
from envace.tts.rollout import tts_rollout
from envace.types import Role

CFG = RolloutConfig(act=SamplingConfig(max_new_tokens=60), rehearse=SamplingConfig(max_new_tokens=60),
                    max_context_tokens=4096)


def _act(prompt: str, position: int) -> str:
    if ASSESS_MARK in prompt:
        return "Achieved: yes. Keep asking for apples."
    if MEMORY_MARK in prompt:
        return "Call get_stock for apple once."
    if prompt.rsplit("<|im_start|>", 1)[0].rstrip().endswith("</tool_response><|im_end|>"):
        return "Done."
    return '<tool_call>\n{"name": "get_stock", "arguments": {"item": "apple"}}\n</tool_call>'


def test_committed_executions_with_their_private_rehearsals_round_trip(tmp_path, tokenizer, tasks, kit):
    engine = kit.ScriptedEngine(tokenizer, act=_act, rehearse=kit.stock_result)
    commits = tts_rollout(tasks, engine, CFG, TTSConfig(n=2, mode="sequential", rehearse_at="every"), kit.ShopEnv,
                          seed=4, k=2)
    store = str(tmp_path / "store.db")
    with TrajectoryWriter(store, "run-tts") as w:
        put_tts(w, commits, step=0, split="test")
    with read_only_session(store) as s:
        listed = list_tts_commits(s, "run-tts")
        # two-turn task: 2 phases x 2 rehearsals; one-turn task: 1 x 2; for each of k = 2 attempts
        assert [(r["prompt_id"], r["attempt"], r["n"], r["tts_mode"], r["n_private"]) for r in listed] == \
            [("two-turns", 0, 2, "sequential", 4), ("two-turns", 1, 2, "sequential", 4),
             ("one-turn", 0, 2, "sequential", 2), ("one-turn", 1, 2, "sequential", 2)]
        n_private = list_trajectories(s, TrajectoryFilter(run_id="run-tts", mode="tts-private")).total
        assert n_private == sum(len(c.tts["private"]) for c in commits) == 12
        by_key = {(c.task.uuid, c.sample_index): c for c in commits}
        for row in listed:
            mem = by_key[(row["prompt_id"], row["attempt"])]
            rec = tts_commit(s, row["trajectory_id"])
            assert rec.memory == mem.tts["memory"] == "Call get_stock for apple once."
            assert rec.seed == mem.tts["seed"] and rec.rehearse_at == "every"
            assert [p["user_turn"] for p in rec.phases] == [ph["user_turn"] for ph in mem.tts["phases"]]
            # the real results of the committed calls (ShopEnv's stock), one per user message
            assert [(c["name"], c["arguments"], c["real"]) for c in rec.real_calls] == \
                [("get_stock", {"item": "apple"}, {"item": "apple", "stock": mem.task.initial_state["apple"]})] \
                * len(mem.task.user_turns)
            privates = tts_rehearsals(s, row["trajectory_id"])
            assert [(p.user_turn, p.rehearsal_index) for p in privates] == \
                [(t.tts["user_turn"], t.tts["index"]) for t in mem.tts["private"]]
            assert [p.assessment for p in privates] == [t.tts["assessment"] for t in mem.tts["private"]]
            assert all(p.achieved is True for p in privates)
            for p in privates:
                assert commit_of(s, p.trajectory_id) == row["trajectory_id"]
                stored = get_trajectory(s, p.trajectory_id)
                assert stored.summary.mode is TrajectoryMode.TTS_PRIVATE and stored.summary.env_calls == 0
                imagined = [t.observation.content for t in stored.turns if t.role is Role.REHEARSE]
                assert imagined == [{"item": "apple", "stock": 42, "rehearsed": "get_stock"}]
        assert tts_commit(s, tts_rehearsals(s, listed[0]["trajectory_id"])[0].trajectory_id) is None
