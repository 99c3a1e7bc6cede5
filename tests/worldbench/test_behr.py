"""BehR on real tool-world transitions with the project's tiny model as the frozen Act checkpoint.

Hand-built world models: the oracle (the real response) gives Δ = 0 exactly; `{}` (an empty result: the
rollout shows Act the parser's error object) and a swapped response (another transition's real response)
give the Δ that a plain, unbatched full forward computes on conversations written out here by hand. The
Act completion is the one SFT trains (envace.trainers.sft_samples.act_samples), and the skip counts are worked out
from the recorded tasks."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from envace.execution_result import render_execution_result
from envace.types import Message
from envace.worldbench.behr import aggregate_behr, behaviour_steps, behr_scores, observation_text
from envace.worldbench.intervals import interval_summary
from envace.worldbench.policy_scoring import act_pair
from envace.worldbench.records import CallKind, Split
from envace.worlds.registry import get_domain

EMPTY = "<execution_result>\n{}\n</execution_result>"


@pytest.fixture(scope="module")
def test_split(world_transitions):
    return [t for t in world_transitions if t.split is Split.TEST]


@pytest.fixture(scope="module")
def steps(test_split):
    return behaviour_steps(test_split)


def plain_logprob(model, prompt: list[int], completion: list[int]) -> float:
    """The slow, obvious version: one unpadded sequence, full logits, log_softmax, the completion's tokens."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(sum(logp[len(prompt) - 1 + j, tok] for j, tok in enumerate(completion)))


def test_act_pair_is_the_sft_act_sample(frozen):
    from envace.trainers.sft_samples import act_samples
    from envace.worlds.generator import generate_tasks

    tok = frozen.tokenizer
    for task in generate_tasks(6, "test", 0):
        samples = act_samples(task, tok)
        assistant = [i for i, m in enumerate(task.messages) if m.role == "assistant"]
        assert len(samples) == len(assistant)
        for i, sample in zip(assistant, samples):
            prompt, completion = act_pair(tok, task.messages[:i], task.tools, task.messages[i])
            assert prompt + completion == sample.ids
            assert sample.is_target == [False] * len(prompt) + [True] * len(completion)


def test_steps_and_skip_counts(test_split, steps):
    found, skipped = steps
    gold = [t for t in test_split if t.kind is CallKind.GOLD]
    tasks = {t.task_id for t in gold}
    # every gold call but each task's last has a logged next action; perturbed calls have none
    assert skipped == {"perturbed": len(test_split) - len(gold), "last_call": len(tasks), "unaligned": 0}
    assert len(found) == len(gold) - len(tasks) == 6
    multi_turn = next(s for s in found if s.transition.task_id == "bank-test-0-00005")
    assert multi_turn.action["role"] == "assistant" and not multi_turn.action.get("tool_calls")  # the final reply
    two_calls = next(s for s in found if s.transition.task_id == "bank-test-0-00002")
    assert two_calls.action["tool_calls"][0]["function"]["name"] == "deposit"  # no reply logged: the next call
    assert two_calls.context[two_calls.obs_index]["role"] == "tool"


def test_oracle_is_zero_and_empty_and_swapped_match_a_plain_forward(frozen, steps):
    found, _ = steps
    oracle = [render_execution_result(s.transition.value) for s in found]
    swapped = [render_execution_result(found[(i + 1) % len(found)].transition.value) for i in range(len(found))]
    before = frozen.forward_rows
    scores, too_long = behr_scores(frozen, found, [oracle, [EMPTY] * len(found), swapped])
    assert too_long == 0 and len(scores) == len(found)
    assert frozen.forward_rows - before == 3 * len(found)  # real, `{}`, swapped: the oracle reuses the real row
    for step, s in zip(found, scores):
        assert s.delta[0] == 0.0 and s.logp_pred[0] == s.logp_real  # the oracle: the real context, scored once
        # by hand: the tool-world Act prompt (domain system prompt, user, the call, its response), then the
        # logged next action, for each of the three responses
        t = step.transition
        call = step.context[step.obs_index - 1]
        fixed = [Message("system", get_domain(t.domain).system_prompt),
                 *[Message.from_openai(m) for m in step.context[:step.obs_index - 1]], Message.from_openai(call)]
        after = [Message.from_openai(m) for m in step.context[step.obs_index + 1:]]
        action = Message.from_openai(step.action)

        def by_hand(obs_text, after=after, fixed=fixed, action=action, t=t):
            msgs = [*fixed, Message("tool", obs_text, name=t.tool), *after]
            return plain_logprob(frozen.model, *act_pair(frozen.tokenizer, msgs, t.tools, action))

        real = by_hand(json.dumps(t.value, sort_keys=True))
        empty = by_hand(json.dumps({"error_tool_call": {"code": "SIMULATOR_EMPTY_RESULT", "message": "result is "
                                                                                                     "empty"}}))
        other = by_hand(json.dumps(found[(found.index(step) + 1) % len(found)].transition.value, sort_keys=True))
        assert s.logp_real == pytest.approx(real, abs=1e-3)
        assert s.delta[1] == pytest.approx(real - empty, abs=1e-3) and abs(s.delta[1]) > 1e-3
        assert s.delta[2] == pytest.approx(real - other, abs=1e-3) and abs(s.delta[2]) > 1e-3
        assert s.n_action_tokens == len(act_pair(frozen.tokenizer, [*fixed], t.tools, action)[1])


def test_summary_reads_the_seed_columns(frozen, steps):
    found, _ = steps
    oracle = [render_execution_result(s.transition.value) for s in found]
    scores, _ = behr_scores(frozen, found, [oracle, [EMPTY] * len(found)])
    agg = aggregate_behr(scores, tolerance=0.1, n_boot=200)["all"]
    d = np.array([s.delta for s in scores])
    assert agg["delta"]["per_seed"] == pytest.approx([0.0, d[:, 1].mean()])
    assert agg["within_tol"]["per_seed"][0] == 1.0  # the oracle seed: every step unchanged
    assert agg["within_tol"]["per_seed"][1] == pytest.approx(float((np.abs(d[:, 1]) <= 0.1).mean()))
    assert agg["abs_delta"]["mean"] == pytest.approx(np.abs(d).mean(axis=1).mean())
    assert "seed_t" in agg["delta"] and "seed_boot" in agg["delta"]  # two seeds: seed-level intervals too
    assert aggregate_behr(scores[:0], 0.1)["all"]["delta"]["n"] == 0


def test_observation_text_is_what_the_rollout_shows():
    assert observation_text(render_execution_result({"b": 1, "a": [2]})) == '{"a": [2], "b": 1}'
    assert json.loads(observation_text("no block"))["error_tool_call"]["code"] == "NO_EXECUTION_RESULT_TAG_FOUND"


def test_pairs_past_the_context_are_left_out_and_counted(frozen, steps):
    found, _ = steps
    saved = frozen.context
    frozen.context = 40
    try:
        scores, too_long = behr_scores(frozen, found, [[EMPTY] * len(found)])
    finally:
        frozen.context = saved
    assert scores == [] and too_long == len(found)


def test_interval_summary_by_hand():
    s = interval_summary(np.array([[1.0], [0.0], [1.0], [1.0]]), n_boot=500)
    assert s["mean"] == 0.75 and s["n"] == 4 and s["seeds"] == 1 and "seed_t" not in s
    assert 0.0 <= s["ci"][0] <= 0.75 <= s["ci"][1] <= 1.0
    same = interval_summary(np.array([[1.0, 1.0], [0.0, 0.0]]), n_boot=50)
    assert same["seed_t"] == [0.5, 0.5]  # both seeds agree: no seed-to-seed spread
    with pytest.raises(ValueError, match="NaN"):
        interval_summary(np.array([[np.nan]]))


def test_raw_response_formatting_does_not_count(frozen, steps):
    """A response recorded with its own spacing and key order (as τ² and BFCL return text) reaches Act as the
    rollout renders it: the oracle still gives Δ = 0 and the real context is the key-sorted JSON."""
    import dataclasses

    found, _ = steps
    step = found[0]
    t = step.transition
    reordered = json.dumps(dict(reversed(list(t.value.items()))), indent=2)
    assert reordered != json.dumps(t.value, sort_keys=True) and json.loads(reordered) == t.value
    moved = dataclasses.replace(step, transition=dataclasses.replace(t, response=reordered),
                                context=[*step.context[:step.obs_index],
                                         {**step.context[step.obs_index], "content": reordered},
                                         *step.context[step.obs_index + 1:]])
    (s,), _ = behr_scores(frozen, [moved], [[render_execution_result(t.value)]])
    (base,), _ = behr_scores(frozen, [step], [[render_execution_result(t.value)]])
    assert s.delta == [0.0] and s.logp_real == base.logp_real
