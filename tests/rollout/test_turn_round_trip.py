"""One record of a generation: a Rehearse output written to the trajectory store (the real
`TrajectoryWriter` on SQLite) and read back gives the same observation, the same fidelity verdict, the same
Act-call link and the same advantage as the rollout's `Turn` in memory, and the dashboard's timeline puts
it in the row of the call that link names.

The rollout is scripted (tests/episode_kit.py's engine test double) so the expected values can be
worked out by hand: one Act output with two calls, rehearsed as one faithful-shaped result and one output
with prose before its block (the strict parse rejects it); a real ShopEnv answers the same calls as the
shadow environment (apple: its stock; plum: not stocked, a TOOL_ERROR)."""

from __future__ import annotations

import math

from envace.config import RolloutConfig, SamplingConfig
from envace.fidelity import turn_fidelity
from envace.rollout import run_rollout
from envace.store.query import get_trajectory, list_trajectories
from envace.store.session import read_only_session
from envace.store.writer import TrajectoryWriter
from envace.trainers.train_rows import assign_advantages, build_rows
from envace.types import CallRef, ErrorCode, Observation, Role, ToolCall
from envace_dashboard.timeline import ActBlock, timeline

CFG = RolloutConfig(act=SamplingConfig(max_new_tokens=80), rehearse=SamplingConfig(max_new_tokens=60),
                    max_context_tokens=4096)


def _rollout(tokenizer, kit, sample_index_seed=0):
    two_calls = kit.call_text("get_stock", item="apple") + "\n" + kit.call_text("get_stock", item="plum")

    def rehearse(prompt, call):
        if call.arguments["item"] == "apple":
            return kit.json_result({"item": "apple", "stock": 42})
        return "Sure, here it is: " + kit.json_result({"item": "plum", "stock": 1})  # prose: rejected

    engine = kit.ScriptedEngine(tokenizer, act=[two_calls, "Done."], rehearse=rehearse)
    task = kit.make_task("apples", ["How many apples and plums?"])
    return run_rollout([task], k=2, policy=engine, cfg=CFG, mode="rehearse", seed=sample_index_seed,
                       shadow_env_factory=kit.ShopEnv)


def test_a_rehearse_output_reads_back_as_the_same_record(tmp_path, tokenizer, kit):
    trajs = _rollout(tokenizer, kit)
    trajs[0].reward, trajs[1].reward = 1.0, 0.0  # a group with signal: nonzero advantages
    rows = build_rows(trajs)
    assign_advantages(rows, "grpo", "per_output", False)
    mem = trajs[0]

    # in memory, worked out by hand: Act turn 0 made two calls; turns 1 and 2 answer calls 0 and 1
    act, apple, plum = mem.turns
    assert (act.role, act.id, [c.arguments["item"] for c in act.tool_calls]) == (Role.ACT, 0, ["apple", "plum"])
    assert (apple.id, apple.answers, apple.call) == (1, CallRef(0, 0), ToolCall("get_stock", {"item": "apple"}))
    assert (plum.id, plum.answers, plum.call) == (2, CallRef(0, 1), ToolCall("get_stock", {"item": "plum"}))
    assert apple.observation == Observation({"item": "apple", "stock": 42}, Role.REHEARSE)
    assert plum.observation.content is None and plum.parse_error is not None
    # the shadow world: apple has 5 in stock, plum is unknown (the error object is what the agent would see)
    assert apple.real_observation.agent_value() == {"item": "apple", "stock": 5}
    assert plum.real_observation.error is ErrorCode.TOOL_ERROR
    # verdicts by hand: apple leaves item=apple (same), stock 42 vs 5 -> F1 = 1/2; plum rejected -> all zero
    assert turn_fidelity(apple) == {"json_valid": True, "schema_ok": True, "exact_match": False, "field_f1": 0.5}
    assert turn_fidelity(plum) == {"json_valid": False, "schema_ok": False, "exact_match": False, "field_f1": 0.0}
    # grpo, group {1.0, 0.0}, no std normalisation: +0.5 on every row of the first trajectory
    assert [t.advantage for t in mem.turns] == [0.5, 0.5, 0.5]
    assert [r.advantage for r in rows if r.turn is apple] == [0.5]  # the row reads its turn

    store = str(tmp_path / "store.db")
    with TrajectoryWriter(store, "run-turns") as w:
        w.put(trajs, step=0)
    with read_only_session(store) as s:
        stored = get_trajectory(s, next(x.id for x in list_trajectories(s).items if x.sample_index == 0))

    gens = [t for t in stored.turns if t.role is not Role.USER]
    assert [t.id for t in gens] == [t.id for t in mem.turns]
    pairs = {p.turn_index: p for p in stored.fidelity_pairs}
    by_id = {t.id: t for t in gens}
    for turn in (apple, plum):
        back = by_id[turn.id]
        assert back.observation == turn.observation  # the same typed Observation, not a dict of it
        assert back.real_observation == turn.real_observation
        assert back.call == turn.call and back.answers == turn.answers
        assert back.parse_error == turn.parse_error and back.text == turn.text
        assert math.isclose(back.advantage, turn.advantage)
        pair = pairs[back.turn_index]
        verdict = {k: getattr(pair, k) for k in ("json_valid", "schema_ok", "exact_match", "field_f1")}
        assert verdict == turn_fidelity(turn)
        assert pair.real == turn.real_observation.agent_value()
        # the link resolves to the stored Act turn's call
        assert by_id[back.answers.act_turn].tool_calls[back.answers.call_index] == turn.call

    # the dashboard reads the pairing from the links: row j of the Act block holds the answer to call j
    (block,) = [b for b in timeline(stored) if isinstance(b, ActBlock) and b.act is not None and b.act.tool_calls]
    assert [(r.call, r.answer.id) for r in block.rows] == [(apple.call, apple.id), (plum.call, plum.id)]
    assert block.rows[0].fidelity.field_f1 == 0.5 and block.rows[1].fidelity.json_valid is False
