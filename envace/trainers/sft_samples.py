"""SFT samples: the token sequences `envace sft` trains on, each with its per-position target mask.

Act samples are a task's gold assistant messages under the chat template and the task's tools, exactly as
the rollout prompts Act, by default packed into one sequence per task (`packed_act_sample`). Rehearse
samples are the gold tool calls under the Rehearse simulator chat, with the environment's TRUE response
wrapped as `<execution_result>` as the target; `error_rehearse_samples` adds wrong-but-well-formed twins of
gold calls answered by the real world (`wrong_call`). Targets end with the end-of-turn token so the model
learns to stop. `tts_prompt_samples` adds test-time rehearsal's prompt rows (envace.tts.sft_data).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from envace.chat_tokens import encode_target
from envace.roles.act import act_prompt_ids
from envace.roles.rehearse import rehearse_messages, rehearse_prompt_ids, render_execution_result
from envace.trainers.config import SFTConfig
from envace.types import Message, Role, Task, ToolCall

END = "<|im_end|>"


@dataclass
class Sample:
    """One training sequence: token ids and, per position, whether it is a target (carries loss)."""

    role: Role
    ids: list[int]
    is_target: list[bool]

    @classmethod
    def of(cls, role: Role, prompt_ids: list[int], target_ids: list[int]) -> Sample:
        return cls(role, prompt_ids + target_ids, [False] * len(prompt_ids) + [True] * len(target_ids))

    @property
    def n_target(self) -> int:
        return sum(self.is_target)


def _chat_text(tokenizer, messages: list[Message], tools, add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template([m.to_openai() for m in messages], tools=tools,
                                         add_generation_prompt=add_generation_prompt, tokenize=False)


def _act_targets(task: Task, tokenizer) -> list[tuple[int, str, str]]:
    """(message index, prompt text, target text) for every assistant message of the gold conversation.
    The target runs to the end-of-turn token inclusive, so the model learns to stop."""
    out = []
    msgs = task.messages
    for i, m in enumerate(msgs):
        if m.role != "assistant":
            continue
        prompt_text = _chat_text(tokenizer, msgs[:i], task.tools, True)
        full_text = _chat_text(tokenizer, msgs[: i + 1], task.tools, False)
        if not full_text.startswith(prompt_text):
            raise ValueError(f"chat template of {tokenizer.name_or_path!r} does not render prompts as prefixes "
                             f"of the conversation (task {task.uuid}, message {i}); SFT targets need that")
        target = full_text[len(prompt_text):]
        target = target[: target.index(END) + len(END)] if END in target else target + (tokenizer.eos_token or "")
        out.append((i, prompt_text, target))
    return out


def act_samples(task: Task, tokenizer) -> list[Sample]:
    """One sample per assistant message: the Act prompt exactly as the rollout builds it, then the
    gold message. The reference form that `packed_act_sample` must reproduce."""
    return [Sample.of(Role.ACT, act_prompt_ids(tokenizer, task.messages[:i], task.tools),
                      encode_target(tokenizer, target))
            for i, _, target in _act_targets(task, tokenizer)]


def packed_act_sample(task: Task, tokenizer) -> Sample | None:
    """All Act targets of a task in ONE sequence: the whole gold conversation with loss on every
    assistant message. Each target token sees exactly the context its per-message sample gives it
    (causal attention; every prompt is a prefix of the conversation), at ~1/n of the tokens for n
    assistant messages. None when a later prompt is not a prefix of the rendered conversation (e.g. a
    template that rewrites earlier turns) or the pieces tokenize differently from the whole prompt;
    callers then fall back to `act_samples`."""
    targets = _act_targets(task, tokenizer)
    if not targets:
        return None
    ids: list[int] = []
    is_target: list[bool] = []
    text = ""
    for i, prompt_text, target in targets:
        if not prompt_text.startswith(text):
            return None
        ctx = tokenizer.encode(prompt_text[len(text):], add_special_tokens=False)
        ids += ctx
        is_target += [False] * len(ctx)
        if ids != act_prompt_ids(tokenizer, task.messages[:i], task.tools):
            return None
        tgt = encode_target(tokenizer, target)
        ids += tgt
        is_target += [True] * len(tgt)
        text = prompt_text + target
    return Sample(Role.ACT, ids, is_target)


def rehearse_samples(task: Task, tokenizer, *, few_shot: bool, style: str) -> list[Sample]:
    out = []
    msgs = task.messages
    for i, m in enumerate(msgs):
        if m.role != "assistant" or not m.tool_calls:
            continue
        responses = [r for r in msgs[i + 1: i + 1 + len(m.tool_calls)] if r.role == "tool"]
        act_text = _chat_text(tokenizer, msgs[: i + 1], task.tools, False)[
            len(_chat_text(tokenizer, msgs[:i], task.tools, True)):].split(END)[0]
        for call, resp in zip(m.tool_calls, responses):
            try:
                obj = json.loads(resp.content)
            except json.JSONDecodeError:
                continue
            chat = rehearse_messages(task, msgs[:i], act_text, call, few_shot=few_shot, style=style)
            target = render_execution_result(obj) + END
            out.append(Sample.of(Role.REHEARSE, rehearse_prompt_ids(tokenizer, chat),
                                 encode_target(tokenizer, target)))
    return out


def wrong_call(call: ToolCall, rng: random.Random) -> ToolCall | None:
    """A wrong twin of a gold call: a string argument replaced by an unknown id, or a number scaled by 1000
    (infeasible amounts); None when the call has neither."""
    strings = [k for k, v in call.arguments.items() if isinstance(v, str)]
    numbers = [k for k, v in call.arguments.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    choices = [("id", k) for k in strings] + [("amount", k) for k in numbers]
    if not choices:
        return None
    kind, key = rng.choice(choices)
    value = f"zz-{rng.randrange(10**6):06d}" if kind == "id" else call.arguments[key] * 1000
    return ToolCall(call.name, {**call.arguments, key: value})


def error_rehearse_samples(task: Task, tokenizer, *, share: float, seed: int, few_shot: bool,
                           style: str) -> tuple[list[Sample], int]:
    """Rehearse samples for wrong twins of a `share` of the task's gold calls, each answered by the real
    world (replaying the gold calls before it); returns the samples and how many answers are errors. A
    twin that the Act parser would reject (it breaks the schema) is never rehearsed in a rollout: skipped."""
    from envace.execution_result import is_error_value
    from envace.roles.act import parse_act
    from envace.rollout.machine import _execute
    from envace.toolcall import render_tool_call
    from envace.worlds.environment import WorldEnvironment

    if share <= 0 or task.initial_state is None:
        return [], 0
    rng = random.Random(f"{seed}|error-demos|{task.uuid}")
    out, n_errors, done = [], 0, []
    msgs = task.messages
    for i, m in enumerate(msgs):
        if m.role != "assistant" or not m.tool_calls:
            continue
        for j, call in enumerate(m.tool_calls):
            twin = wrong_call(call, rng) if rng.random() < share else None
            calls = [*m.tool_calls[:j], twin, *m.tool_calls[j + 1:]] if twin is not None else []
            act_text = "\n".join(render_tool_call(c) for c in calls)
            if twin is not None and not parse_act(act_text, task.tools).error:
                env = WorldEnvironment()
                env.reset(task)
                for c in [*done, *m.tool_calls[:j]]:
                    _execute(env, c)
                value = _execute(env, twin).agent_value()
                n_errors += is_error_value(value)
                chat = rehearse_messages(task, msgs[:i], act_text, twin, few_shot=few_shot, style=style)
                out.append(Sample.of(Role.REHEARSE, rehearse_prompt_ids(tokenizer, chat),
                                     encode_target(tokenizer, render_execution_result(value) + END)))
        done += list(m.tool_calls)
    return out, n_errors


def build_samples(tasks: list[Task], tokenizer, cfg: SFTConfig) -> tuple[list[Sample], list[Sample]]:
    acts, rehs = [], []
    for t in tasks:
        packed = packed_act_sample(t, tokenizer) if cfg.pack_act else None
        acts += [packed] if packed is not None else act_samples(t, tokenizer)
        rehs += rehearse_samples(t, tokenizer, few_shot=cfg.few_shot, style=cfg.rehearse_style)
        rehs += error_rehearse_samples(t, tokenizer, share=cfg.error_demos, seed=cfg.seed, few_shot=cfg.few_shot,
                                       style=cfg.rehearse_style)[0]
    acts += tts_prompt_samples(tasks, tokenizer, cfg)
    keep = lambda s: len(s.ids) <= cfg.max_len  # noqa: E731
    return [s for s in acts if keep(s)], [s for s in rehs if keep(s)]


def tts_prompt_samples(tasks: list[Task], tokenizer, cfg: SFTConfig) -> list[Sample]:
    """Act samples that teach test-time rehearsal's prompts (`tts_prompts`, envace.tts.sft_data): review and
    memory rows, and the gold Act under a memory block, packed as the plain Act samples are."""
    if cfg.tts_prompts <= 0:
        return []
    from envace.tts.sft_data import tts_rows

    rows = tts_rows(tasks, tokenizer, share=cfg.tts_prompts, seed=cfg.seed)
    out = [Sample.of(Role.ACT, prompt, target) for _, prompt, target in rows.notes]
    for t in rows.act_tasks:
        packed = packed_act_sample(t, tokenizer) if cfg.pack_act else None
        out += [packed] if packed is not None else act_samples(t, tokenizer)
    return out
