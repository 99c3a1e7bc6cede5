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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envace.chat_tokens import encode_target
from envace.roles.act import act_prompt
from envace.roles.rehearse import rehearse_messages, rehearse_prompt_ids, render_execution_result
from envace.trainers.config import SFTConfig
from envace.types import Role, Task, ToolCall

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


@dataclass
class ActTurn:
    """One assistant message of a gold conversation as SFT sees it."""

    index: int  # the message's index in the conversation
    prompt_ids: list[int]  # the Act prompt before it, exactly as the rollout builds it (act_prompt)
    text: str  # the message as the template renders it, up to its end-of-turn marker
    target: str  # `text` and the end-of-turn marker (the eos token where the template writes none)


def act_turns(task: Task, tokenizer) -> list[ActTurn]:
    """Every assistant message of the gold conversation: its Act prompt and the template's text for it
    (what the template adds after that prompt when the message is rendered, to its end-of-turn marker
    inclusive, so the model learns to stop). Two renders per message; the Rehearse samples and the Act
    samples of a task share them."""
    out = []
    msgs = task.messages
    for i, m in enumerate(msgs):
        if m.role != "assistant":
            continue
        prompt = act_prompt(tokenizer, msgs[:i], task.tools)
        full_text = tokenizer.apply_chat_template([x.to_openai() for x in msgs[: i + 1]], tools=task.tools or None,
                                                  add_generation_prompt=False, tokenize=False, enable_thinking=True)
        if not full_text.startswith(prompt.text):
            raise ValueError(f"chat template of {tokenizer.name_or_path!r} does not render prompts as prefixes "
                             f"of the conversation (task {task.uuid}, message {i}); SFT targets need that")
        rest = full_text[len(prompt.text):]
        text = rest.split(END)[0]
        target = text + END if END in rest else rest + (tokenizer.eos_token or "")
        out.append(ActTurn(i, prompt.ids, text, target))
    return out


def act_samples(task: Task, tokenizer, turns: list[ActTurn] | None = None) -> list[Sample]:
    """One sample per assistant message: the Act prompt exactly as the rollout builds it, then the
    gold message. The reference form that `packed_act_sample` must reproduce."""
    return [Sample.of(Role.ACT, t.prompt_ids, encode_target(tokenizer, t.target))
            for t in (act_turns(task, tokenizer) if turns is None else turns)]


def packed_act_sample(task: Task, tokenizer, turns: list[ActTurn] | None = None) -> Sample | None:
    """All Act targets of a task in ONE sequence: the whole gold conversation with loss on every
    assistant message. Each target token sees exactly the context its per-message sample gives it
    (causal attention; every prompt's ids begin with the ids before it, earlier targets included), at
    ~1/n of the tokens for n assistant messages. None when a later prompt does not begin with them (e.g.
    a template that rewrites earlier turns, or a turn whose target tokenizes differently inside the
    prompt); callers then fall back to `act_samples`."""
    turns = act_turns(task, tokenizer) if turns is None else turns
    if not turns:
        return None
    ids: list[int] = []
    is_target: list[bool] = []
    for turn in turns:
        if turn.prompt_ids[:len(ids)] != ids:
            return None
        ctx = turn.prompt_ids[len(ids):]
        ids += ctx
        is_target += [False] * len(ctx)
        tgt = encode_target(tokenizer, turn.target)
        ids += tgt
        is_target += [True] * len(tgt)
    return Sample(Role.ACT, ids, is_target)


def rehearse_samples(task: Task, tokenizer, *, few_shot: bool, style: str,
                     turns: list[ActTurn] | None = None) -> list[Sample]:
    """A Rehearse sample per gold call with a JSON response: the Rehearse chat (history, the Act turn's
    text, the call) and the response as `<execution_result>`. `turns`: the task's `act_turns`, when known."""
    out = []
    msgs = task.messages
    for turn in act_turns(task, tokenizer) if turns is None else turns:
        i, m, act_text = turn.index, msgs[turn.index], turn.text
        if not m.tool_calls:
            continue
        responses = [r for r in msgs[i + 1: i + 1 + len(m.tool_calls)] if r.role == "tool"]
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


TaskSamples = Callable[[list[Task], Any, SFTConfig], tuple[list[Sample], list[Sample]]]


def build_samples(tasks: list[Task], tokenizer, cfg: SFTConfig,
                  per_task: TaskSamples | None = None) -> tuple[list[Sample], list[Sample]]:
    """The Act and Rehearse samples of `tasks` (those that fit `max_len`): `task_samples`, or `per_task`
    when given (the same samples built another way, e.g. in two processes), then the TTS prompt rows."""
    acts, rehs = (per_task or task_samples)(tasks, tokenizer, cfg)
    acts += tts_prompt_samples(tasks, tokenizer, cfg)
    keep = lambda s: len(s.ids) <= cfg.max_len  # noqa: E731
    return [s for s in acts if keep(s)], [s for s in rehs if keep(s)]


def task_samples(tasks: list[Task], tokenizer, cfg: SFTConfig) -> tuple[list[Sample], list[Sample]]:
    """Each task's own samples, in task order (a task's samples depend on it alone, so any cut of `tasks`
    into runs built apart and concatenated gives the same lists)."""
    acts, rehs = [], []
    for t in tasks:
        turns = act_turns(t, tokenizer)
        packed = packed_act_sample(t, tokenizer, turns) if cfg.pack_act else None
        acts += [packed] if packed is not None else act_samples(t, tokenizer, turns)
        rehs += rehearse_samples(t, tokenizer, few_shot=cfg.few_shot, style=cfg.rehearse_style, turns=turns)
        rehs += error_rehearse_samples(t, tokenizer, share=cfg.error_demos, seed=cfg.seed, few_shot=cfg.few_shot,
                                       style=cfg.rehearse_style)[0]
    return acts, rehs


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
