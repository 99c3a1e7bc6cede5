"""SFT rows that teach test-time rehearsal's prompts (`SFTConfig.tts_prompts`, envace.tts.sft_data): hand-worked
rows of a tool-world task, the prompts equal the ones the private phase really sends, failed episodes are
labelled by the real world, the Act rows keep the gold targets, and the split guard refuses val / test tasks."""

from __future__ import annotations

import json
import random

import pytest

from envace.config import RolloutConfig
from envace.data.config import DataConfig
from envace.data.tasks import load_tasks
from envace.engines.base import GenRequest, GenResult
from envace.execution_result import is_error_value
from envace.models.corpus import task_strings
from envace.models.tokenizer import train_tokenizer
from envace.trainers.config import SFTConfig
from envace.trainers.sft_samples import build_samples, packed_act_sample, tts_prompt_samples
from envace.tts.config import TTSConfig
from envace.tts.phase import generate_notes
from envace.tts.prompts import MEMORY_HEADER
from envace.tts.sft_data import (
    Episode,
    check_training_tasks,
    failed_episode,
    gold_episode,
    memory_row,
    memory_target,
    review_row,
    tts_rows,
)
from envace.types import Message, ToolCall
from envace.worlds.environment import WorldEnvironment
from envace.worlds.generator import generate_tasks

END = "<|im_end|>"


@pytest.fixture(scope="module")
def world():
    tasks = generate_tasks(40, "train", 0)
    return tasks, train_tokenizer([s for t in tasks for s in task_strings(t)], vocab_size=1024)


def _user_chat(tok, text: str) -> str:
    return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False,
                                   enable_thinking=False)


class CaptureEngine:
    """Records the requests the private phase sends; answers each with an empty text."""

    chat = False

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.requests = tokenizer, []

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        self.requests += requests
        return [GenResult(token_ids=[], logprobs=[], text="") for _ in requests]


BALANCE_EPISODE = """User: What is the balance of a5?
Assistant: <tool_call>
{"name": "get_balance", "arguments": {"account": "a5"}}
</tool_call>
Tool[get_balance]: {"account": "a5", "balance": 66, "status": "open"}
Assistant: a5: 66"""


def test_review_row_of_a_gold_episode_by_hand(world):
    tasks, tok = world
    task = tasks[0]  # bank-train-0-00000: "What is the balance of a5?"
    assert task.uuid == "bank-train-0-00000"
    prompt, target = review_row(task, gold_episode(task), tok, TTSConfig(), 1024)
    expected = ("Review of an imagined attempt.\nThe tool results below were imagined by you; no tool was really "
                "called.\n\nUser request:\nWhat is the balance of a5?\n\nImagined episode:\n" + BALANCE_EPISODE
                + '\n\nDid this episode achieve the request? Answer on the first line exactly "Achieved: yes" or '
                  '"Achieved: no", then say in one sentence what to change next time.')
    assert tok.decode(prompt) == _user_chat(tok, expected)
    assert tok.decode(target) == "Achieved: yes\nNothing to change." + END


def test_failed_episode_by_hand_and_its_review(world):
    tasks, tok = world
    task = tasks[0]
    ep = failed_episode(task, random.Random(7))
    assert ep is not None and not ep.achieved
    twin = ep.messages[-2].tool_calls[0]
    assert twin.name == "get_balance" and twin.arguments["account"].startswith("zz-")
    error = json.loads(ep.messages[-1].content)
    assert list(error) == ["error"] and twin.arguments["account"] in error["error"]
    assert [m.role for m in ep.messages] == ["system", "user", "assistant", "tool"]  # the error ends it
    assert ep.review == 'Achieved: no\nNext time call get_balance {"account": "a5"}.'
    prompt, target = review_row(task, ep, tok, TTSConfig(), 1024)
    assert tok.decode(target) == ep.review + END
    assert f"Tool[get_balance]: {ep.messages[-1].content}" in tok.decode(prompt)


def test_memory_target_by_hand(world):
    tasks, tok = world
    task = tasks[2]  # bank-train-0-00002: deposit 18 into the account of hal
    assert task.user_turns == ["Deposit 18 into the account of hal."]
    wrong = ToolCall("deposit", {"account": "zz-000001", "amount": 18})
    failed = Episode([], False, "Achieved: no", wrong=wrong)
    assert memory_target(gold_episode(task), [failed], tok, 1000) == (
        '1. find_account {"owner": "hal"}\n2. deposit {"account": "a1", "amount": 18}\n'
        'Avoid: deposit {"account": "zz-000001", "amount": 18}')
    # the cap keeps whole lines: the first line alone
    first = '1. find_account {"owner": "hal"}'
    cap = len(tok.encode(first, add_special_tokens=False))
    assert memory_target(gold_episode(task), [failed], tok, cap) == first


def test_prompts_equal_what_the_private_phase_sends(world):
    """The review and memory rows' prompt ids are the ids TTS's own `generate_notes` sends for the same text."""
    from envace.tts.prompts import assess_prompt, memory_prompt

    tasks, tok = world
    tts, cfg = TTSConfig(), RolloutConfig()
    for task in tasks[:8]:
        gold, failed = gold_episode(task), failed_episode(task, random.Random(1))
        for ep in [gold, *([failed] if failed else [])]:
            engine = CaptureEngine(tok)
            text = "\n".join(
                [f"User: {task.user_turns[0]}"] + [_line(m) for m in ep.messages[2:]])
            request = task.user_turns[0]
            generate_notes(engine, [lambda c, r=request, t=text: assess_prompt(r, t, c)], [0],
                           max_new=tts.assess_max_tokens, temperature=1.0, cfg=cfg, max_chars=tts.transcript_max_chars,
                           enable_thinking=tts.enable_thinking)
            assert review_row(task, ep, tok, tts, cfg.max_context_tokens)[0] == engine.requests[0].prompt_ids
        shown = [gold, *([failed] if failed else [])]
        engine = CaptureEngine(tok)
        texts = ["\n".join([f"User: {task.user_turns[0]}"] + [_line(m) for m in e.messages[2:]]) for e in shown]
        reviews, request = [e.review for e in shown], task.user_turns[0]
        generate_notes(engine, [lambda c, r=request, t=texts, v=reviews: memory_prompt(
            r, t, v, tts.memory_words, max(c // len(t), 20))], [0],
                       max_new=tts.memory_max_tokens, temperature=1.0, cfg=cfg, max_chars=tts.transcript_max_chars,
                       enable_thinking=tts.enable_thinking)
        assert memory_row(task, shown, gold, tok, tts, cfg.max_context_tokens)[0] == engine.requests[0].prompt_ids


def _line(m: Message) -> str:
    """One transcript line, written out here independently of envace.roles.rehearse.transcript."""
    if m.role == "assistant":
        calls = ["<tool_call>\n" + json.dumps({"name": c.name, "arguments": c.arguments}) + "\n</tool_call>"
                 for c in m.tool_calls]
        return "Assistant: " + "\n".join(([m.content] if m.content else []) + calls)
    return f"Tool[{m.name}]: {m.content}"


def test_every_failed_label_comes_from_a_world_error(world):
    tasks, tok = world
    n = 0
    for task in tasks:
        rng = random.Random(f"check|{task.uuid}")
        ep = failed_episode(task, rng)
        if ep is None:
            continue
        n += 1
        # replay the episode's calls in a fresh world: the last answer is an error, the earlier ones are not
        env = WorldEnvironment()
        env.reset(task)
        calls = [c for m in ep.messages if m.role == "assistant" for c in m.tool_calls]
        values = [env.execute(c).agent_value() for c in calls]
        assert is_error_value(values[-1]) and not any(is_error_value(v) for v in values[:-1])
        assert json.loads(ep.messages[-1].content) == values[-1]
        assert ep.review.startswith("Achieved: no")
    assert n >= 20


def test_act_rows_keep_the_gold_targets_under_a_block(world):
    tasks, tok = world
    rows = tts_rows(tasks, tok, share=1.0, seed=0)
    assert rows.counts["act"] == len(tasks) and rows.counts["review"] > 30 and rows.counts["memory"] > 30
    by_uuid = {t.uuid: t for t in tasks}
    headers = set()
    for act in rows.act_tasks:
        plain = packed_act_sample(by_uuid[act.uuid], tok)
        under = packed_act_sample(act, tok)
        targets = lambda s: [i for i, t in zip(s.ids, s.is_target) if t]  # noqa: E731
        assert targets(under) == targets(plain)
        system = act.messages[0].content
        assert system.startswith(by_uuid[act.uuid].system_prompt + "\n\n")
        headers.add(system.split("\n\n", 1)[1].split("\n", 1)[0])
    assert headers == {MEMORY_HEADER, "Earlier private rehearsals of this request (imagined; nothing was executed):"}


def test_share_and_off(world):
    tasks, tok = world
    assert SFTConfig(model="m").tts_prompts == 0.0
    assert tts_rows(tasks, tok, share=0.0, seed=0).notes == []
    cfg = SFTConfig(model="m", data=DataConfig(n_tasks=40))
    assert build_samples(tasks, tok, cfg) == build_samples(tasks, tok, cfg.model_copy(update={"tts_prompts": 0.0}))
    assert tts_prompt_samples(tasks, tok, cfg) == []
    half = tts_rows(tasks, tok, share=0.5, seed=0).counts["act"]
    assert 10 <= half <= 30
    with pytest.raises(ValueError, match="tts_prompts=1.5"):
        tts_rows(tasks, tok, share=1.5, seed=0)


@pytest.mark.parametrize("split", ["val", "test"])
def test_split_guard_refuses_held_out_tasks(world, split):
    _, tok = world
    held = generate_tasks(4, split, 0)
    with pytest.raises(ValueError, match=f"split '{split}'.*tts_prompts=0"):
        tts_rows(held, tok, share=1.0, seed=0)
    with pytest.raises(ValueError, match=f"split '{split}'"):
        check_training_tasks(generate_tasks(3, "train", 0) + held[:1])
    with pytest.raises(ValueError, match="data.split=.*tts_prompts=0"):
        SFTConfig(model="m", tts_prompts=0.2, data=DataConfig(split=split))
    SFTConfig(model="m", tts_prompts=0.0, data=DataConfig(split=split))  # off: any split


def test_split_guard_reads_exported_files(world, tmp_path):
    from envace.data.export import export_world

    _, tok = world
    export_world(tmp_path, {"train": 4, "test": 4}, 0)
    test_tasks = load_tasks(DataConfig(source="cm2", path=str(tmp_path / "test.json")))
    with pytest.raises(ValueError, match="split 'test'"):
        tts_prompt_samples(test_tasks, tok, SFTConfig(model="m", tts_prompts=1.0))
    train_tasks = load_tasks(DataConfig(source="cm2", path=str(tmp_path / "train.json")))
    assert tts_prompt_samples(train_tasks, tok, SFTConfig(model="m", tts_prompts=1.0))
