"""The oracle-rehearsal invariant on the embedded rollout: with a Rehearse seat that writes exactly the real
environment's answer (envace.rollout.oracle), rehearse mode and env mode with the same seeds give the same
Act tokens, terminations, rewards and Act-row advantages, under every setting of the episode rules that
is meant to treat the modes alike; the rules meant to differ by mode (the reference's) break it, which
shows the comparison can fail. Episodes are scripted (tests/scripted_episodes.py) on tool-world tasks; Act
samples at temperature 1 and gives up on a seeded share of its turns, so the K samples of a task differ,
their rewards too, and the Act advantages compared are not all 0 (a baseline that mixed in Rehearse rows, which
only rehearse mode has, would show). The scripted engines' own sampling contract is checked at the end."""

from __future__ import annotations

import pytest
from scripted_episodes import GIVE_UP, PLANS, ScriptedAct, plan

from envace.config import RolloutConfig, SamplingConfig
from envace.engines.base import GenRequest
from envace.roles.act import act_prompt_ids
from envace.roles.rehearse import rehearse_messages, rehearse_prompt_ids
from envace.rollout import run_rollout
from envace.rollout.oracle import OracleRehearser
from envace.toolcall import render_tool_call
from envace.trainers.rewarding import RewardScorer
from envace.trainers.train_rows import assign_advantages, build_rows
from envace.types import Mode, Role, TerminationReason
from envace.worlds.environment import WorldEnvironment
from envace.worlds.generator import generate_tasks

ALIKE = [{}, {"invalid_call": "end"}, {"error_observation": "end"}, {"rehearse_parse_failure": "observe"},
         {"max_context_tokens": 1100}]  # 1100: some Rehearse prompts (full style) no longer fit, in both modes
K, SLIP = 3, 0.25  # samples per task; the share of Act turns on which the script gives up (seeded)


@pytest.fixture(scope="module")
def world():
    from envace.models.corpus import task_strings
    from envace.models.tokenizer import train_tokenizer

    tasks = generate_tasks(12, "train", 0)
    tok = train_tokenizer([s for t in tasks for s in task_strings(t)], vocab_size=1024)
    return tasks, tok


def cfg_of(**kw) -> RolloutConfig:
    base = dict(act=SamplingConfig(temperature=1.0, max_new_tokens=200),
                rehearse=SamplingConfig(temperature=1.0, max_new_tokens=200),
                max_assistant_turns=6, max_calls_per_turn=6, max_context_tokens=4096, rehearse_style="full")
    return RolloutConfig(**{**base, **kw})


def episodes(world, kind: str, mode: Mode, cfg: RolloutConfig):
    """Scored trajectories (K per task) and their rows with role-wise GRPO advantages."""
    tasks, tok = world
    out = []
    for i, task in enumerate(tasks[:6]):
        texts = plan(task, kind)
        act = ScriptedAct(tok, texts, slip=SLIP)
        policy = {Role.ACT: act, Role.REHEARSE: OracleRehearser(tok, [task], WorldEnvironment)}
        scorer = RewardScorer("checklist_rule")
        trajs = run_rollout([task], k=K, policy=act if mode is Mode.ENV else policy, cfg=cfg, mode=mode,
                            env_factory=WorldEnvironment, step=3, seed=11 + i, turn_gate=scorer.turn_gate)
        scorer.score(trajs)
        out.extend(trajs)
    for n, t in enumerate(out):
        t.prompt_index = n // K
    rows = build_rows(out)
    assign_advantages(rows, "role_grpo", "per_output", False)
    return out, rows


def summary(trajs, rows):
    """What the invariant compares: per trajectory the Act tokens, the termination and the reward; the
    Act rows' advantages."""
    return ([([t.response_ids for t in tr.turns_of(Role.ACT)], tr.termination, tr.reward) for tr in trajs],
            [r.advantage for r in rows if r.role is Role.ACT])


@pytest.mark.parametrize("rules", ALIKE, ids=lambda r: ",".join(f"{k}={v}" for k, v in r.items()) or "defaults")
def test_oracle_rehearsal_equals_the_real_environment(world, rules):
    cfg = cfg_of(**rules)
    seen, rehearsed, signal = set(), False, 0
    for kind in PLANS:
        reh, reh_rows = episodes(world, kind, Mode.REHEARSE, cfg)
        env, env_rows = episodes(world, kind, Mode.ENV, cfg)
        assert summary(reh, reh_rows) == summary(env, env_rows), (kind, rules)
        # rehearse mode made no real call; both saw the same tool messages
        assert all(t.env_calls == 0 for t in reh) and [t.messages for t in reh] == [t.messages for t in env]
        seen.update(t.termination for t in reh)
        rehearsed = rehearsed or any(r.role is Role.REHEARSE for r in reh_rows)
        signal += sum(1 for r in reh_rows if r.role is Role.ACT and abs(r.advantage) > 1e-6)
    assert rehearsed  # the oracle answered calls (its rows are Rehearse rows)
    assert signal >= 10  # rewards differ within groups: the advantage comparison can fail
    if rules == {}:  # the scripts reach the rules they test
        assert TerminationReason.FINAL_REPLY in seen
    if rules == {"error_observation": "end"}:
        assert TerminationReason.ERROR_OBSERVATION in seen
    if rules == {"invalid_call": "end"}:
        assert TerminationReason.INVALID_TOOL_CALL in seen
    if "max_context_tokens" in rules:
        assert TerminationReason.CONTEXT_LIMIT in seen


@pytest.mark.parametrize("rules, kind", [
    ({"error_observation": "end_rehearsed"}, "errors"),  # the reference: a rehearsed error ends, a real one not
    ({"rehearse_context": "rehearse_only", "max_context_tokens": 1100}, "gold"),  # only Rehearse prompts count
])
def test_rules_that_differ_by_mode_break_the_invariant(world, rules, kind):
    cfg = cfg_of(**rules)
    reh = summary(*episodes(world, kind, Mode.REHEARSE, cfg))
    env = summary(*episodes(world, kind, Mode.ENV, cfg))
    assert reh != env


def test_the_oracle_answers_as_the_world_would(world):
    """Every rehearsed observation equals the real one a shadow environment records for the same call."""
    tasks, tok = world
    for task in tasks[:6]:
        act = ScriptedAct(tok, plan(task, "twice"))
        (traj,) = run_rollout([task], k=1, policy={Role.ACT: act,
                                                   Role.REHEARSE: OracleRehearser(tok, [task], WorldEnvironment)},
                              cfg=cfg_of(), mode=Mode.REHEARSE, shadow_env_factory=WorldEnvironment)
        reh = traj.turns_of(Role.REHEARSE)
        assert reh
        for t in reh:
            assert t.observation.agent_value() == t.real_observation.agent_value()


def test_the_oracle_refuses_prompts_without_the_latest_act_output(world):
    tasks, tok = world
    act = ScriptedAct(tok, plan(tasks[0], "gold"))
    with pytest.raises(ValueError, match="rehearse_style=full"):
        run_rollout(tasks[:1], k=1, policy={Role.ACT: act, Role.REHEARSE: OracleRehearser(tok, tasks[:1],
                                                                                           WorldEnvironment)},
                    cfg=cfg_of(rehearse_style="history"), mode=Mode.REHEARSE)


# ----- the scripted engines keep a sampling engine's contract ----------------------------------------------


def _act_request(world, temperature=1.0, seed=None, max_new_tokens=200):
    tasks, tok = world
    return GenRequest(act_prompt_ids(tok, tasks[0].messages[:2], tasks[0].tools), temperature=temperature,
                      seed=seed, max_new_tokens=max_new_tokens)


def test_scripted_act_follows_its_seed_and_is_deterministic_when_greedy(world):
    tasks, tok = world
    act = ScriptedAct(tok, plan(tasks[0], "gold"), slip=0.5)
    texts = {s: act.generate([_act_request(world, seed=s)])[0].text for s in range(40)}
    assert texts == {s: act.generate([_act_request(world, seed=s)])[0].text for s in range(40)}  # same seed, same
    gave_up = {s for s, t in texts.items() if t.startswith(GIVE_UP)}
    assert 5 < len(gave_up) < 35  # different seeds, different outputs
    greedy = {act.generate([_act_request(world, temperature=0.0, seed=s)])[0].text for s in range(40)}
    assert len(greedy) == 1 and not greedy.pop().startswith(GIVE_UP)  # greedy: the plan, whatever the seed
    assert {ScriptedAct(tok, plan(tasks[0], "gold")).generate([_act_request(world, seed=s)])[0].text
            for s in range(40)} == {texts[min(set(texts) - gave_up)]}  # slip 0: always the plan


def test_the_scripted_engines_cut_at_max_new_tokens(world):
    tasks, tok = world
    act = ScriptedAct(tok, plan(tasks[0], "gold"))
    full = act.generate([_act_request(world)])[0]
    assert full.finish_reason == "stop" and full.token_ids[-1] == act.eos_id
    cut = act.generate([_act_request(world, max_new_tokens=5)])[0]
    assert cut.finish_reason == "length" and cut.token_ids == full.token_ids[:5]
    assert cut.text == tok.decode(full.token_ids[:5], skip_special_tokens=False)
    # the oracle Rehearse engine: the world's answer, cut the same way
    task = tasks[0]
    call_at = next(i for i, m in enumerate(task.messages) if m.tool_calls)
    call = task.messages[call_at].tool_calls[0]
    latest = "\n".join(render_tool_call(c) for c in task.messages[call_at].tool_calls)
    ids = rehearse_prompt_ids(tok, rehearse_messages(task, task.messages[:call_at], latest, call, few_shot=True,
                                                     style="full"))
    oracle = OracleRehearser(tok, [task], WorldEnvironment)
    (whole,) = oracle.generate([GenRequest(ids, max_new_tokens=500)])
    assert whole.finish_reason == "stop" and whole.text.startswith("<execution_result>")
    (short,) = OracleRehearser(tok, [task], WorldEnvironment).generate([GenRequest(ids, max_new_tokens=4)])
    assert short.finish_reason == "length" and short.token_ids == whole.token_ids[:4]
    assert short.text == tok.decode(whole.token_ids[:4], skip_special_tokens=False)
