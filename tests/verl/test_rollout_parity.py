"""One rollout contract on both backends: the same scripted episodes (tests/scripted_episodes.py) through the
embedded rollout and through the verl agent loop (verl's real classes, the scripted-server stand-in of
conftest; an oracle Rehearse engine answers the Rehearse calls on both) end with the same termination,
the same turns (role and tokens of every trainable call) and the same reward, for every episode rule
setting, in rehearse and env mode. On the verl loop, too, oracle rehearsal equals the real environment
(the invariant of tests/rollout/test_oracle_invariant.py): same Act rows, rewards and role-wise advantages
(envace's verl advantage estimator)."""

from __future__ import annotations

import pytest
from scripted_episodes import PLANS, ScriptedAct, act_text, is_rehearse_prompt, plan

from envace.config import RolloutConfig, SamplingConfig
from envace.rollout import derive_seed, run_rollout
from envace.rollout.oracle import OracleRehearser
from envace.trainers.rewarding import RewardScorer
from envace.trainers.verl.config import LoopSettings, RoleSampling
from envace.types import Mode, Role
from envace.worlds.environment import WorldEnvironment

pytestmark = pytest.mark.verl

TASKS = (0, 3, 5)  # one call; two calls in one Act output; two user turns
LIMITS = dict(max_assistant_turns=6, max_calls_per_turn=6)
RULES = [  # (rule switches, the plans that exercise them, an ending the scripts must reach under them)
    ({}, PLANS, "final_reply"), ({"invalid_call": "end"}, ("malformed",), "invalid_tool_call"),
    ({"error_observation": "end"}, ("errors",), "error_observation"),
    ({"error_observation": "end_rehearsed"}, ("errors",), "rehearse_error"),
    ({"max_context_tokens": 1100}, ("gold",), "context_limit"),
    ({"rehearse_context": "rehearse_only", "max_context_tokens": 1100}, ("gold",), "context_limit")]


class OracleServer:
    """verl's server manager stand-in: Act calls from the script, Rehearse calls from the oracle."""

    def __init__(self, tokenizer, token_output, task, texts):
        self.tokenizer, self.token_output, self.texts = tokenizer, token_output, texts
        self.oracle = OracleRehearser(tokenizer, [task], WorldEnvironment)
        self.seen: dict = {}  # requests reach the server in the rollout's order (no awaits in between)
        self.eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        prompt = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        if is_rehearse_prompt(prompt):
            ids = self.tokenizer.encode(self.oracle.answer(prompt, self.seen), add_special_tokens=False)
        else:
            ids = self.tokenizer.encode(act_text(prompt, self.texts), add_special_tokens=False) + [self.eos_id]
        return self.token_output(token_ids=ids, log_probs=[-0.01 * (i + 1) for i in range(len(ids))],
                                 stop_reason="completed", extra_fields={})


def verl_episode(run_session, verl_api, verl_config_factory, rl_dataset, tokenizer, world_tasks, i, kind, mode,
                 rules):
    settings = LoopSettings(mode=mode.value, act=RoleSampling(max_tokens=200), rehearse=RoleSampling(max_tokens=200),
                            rehearse_style="full", max_context_tokens=rules.get("max_context_tokens", 4096),
                            **LIMITS, **{k: v for k, v in rules.items() if k != "max_context_tokens"})
    server = OracleServer(tokenizer, verl_api["TokenOutput"], world_tasks[i], plan(world_tasks[i], kind))
    outputs = run_session(verl_config_factory(loop=settings), server, tokenizer, rl_dataset[i])
    ends = {o.extra_fields["termination"] for o in outputs}
    rewards = {o.reward_score for o in outputs}
    assert len(ends) == 1 and len(rewards) == 1, (ends, rewards)
    return {"termination": ends.pop(), "turns": [(o.extra_fields["role"], list(o.response_ids)) for o in outputs],
            "reward": rewards.pop()}, outputs


def embedded_episode(tokenizer, world_tasks, i, kind, mode, rules):
    task = world_tasks[i]
    cfg = RolloutConfig(mode=mode.value, act=SamplingConfig(max_new_tokens=200),
                        rehearse=SamplingConfig(max_new_tokens=200), rehearse_style="full",
                        **{"max_context_tokens": 4096, **LIMITS, **rules})
    engine = ScriptedAct(tokenizer, plan(task, kind), rehearser=OracleRehearser(tokenizer, [task], WorldEnvironment))
    scorer = RewardScorer("checklist_rule")
    (traj,) = run_rollout([task], k=1, policy=engine, cfg=cfg, mode=mode, env_factory=WorldEnvironment, step=3,
                          seed=derive_seed(0, i, 0), turn_gate=scorer.turn_gate, rehearse_style="full")
    scorer.score([traj])
    return {"termination": traj.termination.value,
            "turns": [(t.role.value, list(t.response_ids)) for t in traj.turns if t.trainable and t.response_ids],
            "reward": float(traj.reward)}


@pytest.mark.parametrize("rules, plans, reached", RULES,
                         ids=[",".join(f"{k}={v}" for k, v in r.items()) or "defaults" for r, _, _ in RULES])
def test_the_same_episodes_on_both_backends(run_session, verl_api, verl_config_factory, rl_dataset, tokenizer,
                                            world_tasks, rules, plans, reached):
    ends = set()
    for mode in (Mode.REHEARSE, Mode.ENV):
        for kind in plans:
            for i in TASKS:
                verl, _ = verl_episode(run_session, verl_api, verl_config_factory, rl_dataset, tokenizer,
                                       world_tasks, i, kind, mode, rules)
                embedded = embedded_episode(tokenizer, world_tasks, i, kind, mode, rules)
                assert verl == embedded, (mode, kind, i)
                ends.add(verl["termination"])
    assert reached in ends  # the scripts reach the rule under test


def _act_advantages(outputs_by_task):
    """envace's role-wise advantage on verl (token_role_advantages) over all of a plan's episodes as one group,
    so rewards differ within it; the Act rows' values."""
    import torch

    from envace.trainers.verl.advantage import token_role_advantages

    rows = [(i, o) for i, outs in enumerate(outputs_by_task.values()) for o in outs]
    length = max(len(o.response_ids) for _, o in rows)
    mask, scores = torch.zeros(len(rows), length), torch.zeros(len(rows), length)
    for r, (_, o) in enumerate(rows):
        mask[r, : len(o.response_ids)] = 1
        scores[r, len(o.response_ids) - 1] = o.reward_score
    adv, _ = token_role_advantages(scores, mask, ["g"] * len(rows), [f"t{i}" for i, _ in rows],
                                   [o.extra_fields["role"] for _, o in rows],
                                   scored=[o.extra_fields["envace_scored"] for _, o in rows])
    return [float(adv[r, 0]) for r, (_, o) in enumerate(rows) if o.extra_fields["role"] == Role.ACT.value]


@pytest.mark.parametrize("rules", [{}, {"error_observation": "end"}], ids=["defaults", "error_observation=end"])
def test_oracle_rehearsal_equals_the_real_environment_on_verl(run_session, verl_api, verl_config_factory, rl_dataset,
                                                              tokenizer, world_tasks, rules):
    signal = False
    for kind in PLANS:
        groups = {}
        for mode in (Mode.REHEARSE, Mode.ENV):
            groups[mode] = {}
            for i in TASKS:
                _, outputs = verl_episode(run_session, verl_api, verl_config_factory, rl_dataset, tokenizer,
                                          world_tasks, i, kind, mode, rules)
                groups[mode][f"task{i}"] = outputs
        act = {m: [[(list(o.response_ids), o.reward_score, o.extra_fields["termination"]) for o in outs
                    if o.extra_fields["role"] == Role.ACT.value] for outs in g.values()] for m, g in groups.items()}
        assert act[Mode.REHEARSE] == act[Mode.ENV], kind
        advantages = {m: _act_advantages(g) for m, g in groups.items()}
        assert advantages[Mode.REHEARSE] == advantages[Mode.ENV], kind
        signal = signal or any(a != 0 for a in advantages[Mode.ENV])
    assert signal  # some group's rewards differ: the advantages compared are not all 0
