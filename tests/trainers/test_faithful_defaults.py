"""Faithful defaults: the Rehearse prompt carries the history h_t by default (the
`history` style: same-tool few-shot, the transcript, the call), `compact` stays an ablation; SFT
writes the same prompts as the RL rollout; a malformed Act call is handled by one rule in every arm."""

from __future__ import annotations

from envace.config import RolloutConfig
from envace.roles.prompts import HISTORY_SYSTEM_PROMPT
from envace.roles.rehearse import rehearse_messages
from envace.trainers.config import SFTConfig, TrainConfig
from envace.types import ToolCall
from envace.worlds.generator import generate_tasks


def test_history_style_by_hand():
    task = generate_tasks(6, "train", 3)[5]  # ann's account, then "Move 5 from it to a6."
    call = ToolCall("transfer", {"amount": 5, "dst": "a6", "src": "a2"})
    history = task.messages[:6]  # system, user, find_account call, its result, the reply, the 2nd user turn
    system, user = rehearse_messages(task, history, "ignored", call, few_shot=True, style="history")
    assert system["content"] == HISTORY_SYSTEM_PROMPT
    assert user["content"] == "\n".join([
        "Previous tool calls and results (few-shot):",
        '{"arguments": {"amount": 5, "dst": "a6", "src": "a2"}, "name": "transfer", "response": '
        '{"amount": 5, "dst": "a6", "ok": true, "src": "a2"}}',
        "",
        "Current conversation history:",
        "User: Which account is the one of ann?",
        "Assistant: <tool_call>",
        '{"name": "find_account", "arguments": {"owner": "ann"}}',
        "</tool_call>",
        'Tool[find_account]: {"account": "a2", "owner": "ann"}',
        "Assistant: ann: a2",
        "User: Move 5 from it to a6.",
        "",
        "Current tool to simulate:",
        "name: transfer",
        "schema: transfer(src: string, dst: string, amount: integer) - Move money from one account to another.",
        'arguments: {"amount": 5, "dst": "a6", "src": "a2"}',
    ])
    compact = rehearse_messages(task, history, "ignored", call, few_shot=True, style="compact")[1]["content"]
    assert "Current conversation history:" not in compact and "ann" not in compact


def test_defaults_carry_history_and_match_between_sft_and_rl():
    assert RolloutConfig().rehearse_style == "history"
    assert TrainConfig.model_validate({"model": "m"}).rollout.rehearse_style == "history"
    assert SFTConfig(model="m").rehearse_style == "history"


def test_training_arms_handle_malformed_calls_alike():
    for mode in ("rehearse", "env"):
        assert TrainConfig.model_validate({"model": "m", "rollout": {"mode": mode}}).rollout.invalid_call == "observe"
        cfg = TrainConfig.model_validate({"model": "m", "rollout": {"mode": mode, "invalid_call": "end"}})
        assert cfg.rollout.invalid_call == "end"
    # outside training too: one rule set for every mode (envace.config.EpisodeRules)
    assert RolloutConfig().rule_values() == {"invalid_call": "observe", "error_observation": "continue",
                                             "rehearse_parse_failure": "end", "rehearse_context": "every_mode"}


def test_test_tasks_can_take_their_few_shot_from_the_training_sample():
    from envace.roles.rehearse import few_shot_triples, with_training_few_shot

    train = generate_tasks(30, "train", 3)
    test = generate_tasks(6, "test", 3)
    [task] = with_training_few_shot(test[:1], train, per_tool=1)
    gold = few_shot_triples(test[0])
    shots = few_shot_triples(task)
    expected = []
    for name in test[0].tool_names():  # by hand: the first training triple of each of the task's tools
        first = next((tr for t in train for tr in few_shot_triples(t) if tr[0] == name), None)
        if first is not None:
            expected.append(first)
    assert shots == expected and shots
    assert not any(g in shots for g in gold)  # none of the test task's own gold pairs
    call = gold[0]
    prompt = rehearse_messages(task, task.messages[:2], "", ToolCall(call[0], call[1]), few_shot=True,
                               style="history")[1]["content"]
    assert json_line(call[2]) not in prompt
    assert task.messages == test[0].messages and test[0].meta.get("few_shot_triples") is None  # a copy


def json_line(value) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True)
