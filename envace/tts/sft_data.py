"""SFT rows that teach test-time rehearsal's own prompts (`SFTConfig.tts_prompts`), so a small policy has seen
the review prompt, the memory prompt and a memory block in its system prompt before TTS asks for them.

Each row is about the task's first user turn, the turn the default `rehearse_at=first` rehearses. A chosen
task gives one row of each kind:
- `review`: the self-assessment prompt (envace.tts.prompts.assess_prompt) over one episode. The target is
  "Achieved: yes" or "Achieved: no", then one sentence.
- `memory`: the prose memory prompt (memory_prompt) over 1-3 episodes, the gold one always among them,
  each with its review. The target lists the achieved episode's calls one per line (the `calls` layout,
  envace.tts.structured.call_line), then one `Avoid:` line per failed call, capped like a memory.
- `act`: the gold conversation with a block in its system prompt, as TTS shows it. The block is a memory
  note (prose / calls_results / calls layout from the gold episode, calls_results from a failed episode,
  or an empty note), or the earlier-attempts note that a later sequential rehearsal sees. The target is
  the gold Act (the caller packs it), so the block changes the context and never the answer: the policy
  learns to use a right note and to act correctly past a wrong one.

Episodes. The gold episode is the oracle one: the reference calls with the world's true responses, reviewed
"Achieved: yes". A failed episode replays the gold turn up to one call and swaps that call's string
argument for an id the world does not know. The REAL tool world answers it from the state the gold calls
before it left. It is kept only when that answer is an error, which ends it as a rehearsed error ends a
rehearsal; it is reviewed "Achieved: no". Departure: the paper trains no such rows. These failed episodes
stand in for the policy's own imperfect rehearsals, which an untrained model cannot produce, and their
labels come from the world, not from a model.

Split guard (`check_training_tasks`): rows come from training tasks only. A task tagged with another
split (the tool world's `meta["split"]`, which its exported files keep) is refused. Untagged tasks (an
external CM2 file) are taken to be the training file they were given as.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

from envace.chat_tokens import encode_target
from envace.execution_result import is_error_value
from envace.roles.act import chat_ids
from envace.rollout.machine import _execute
from envace.tts.config import TTSConfig
from envace.tts.phase import imagined, said_requests
from envace.tts.prompts import (
    MEMORY_HEADER,
    assess_prompt,
    earlier_attempts_note,
    memory_note,
    memory_prompt,
    with_system_note,
)
from envace.tts.structured import bounded, call_line, rehearsal_calls
from envace.types import Message, Mode, Task, ToolCall, Trajectory

END = "<|im_end|>"
YES_FIX = "Nothing to change."
NO_CALL = "No tool call: answer directly."
ACT_BLOCKS: tuple[str, ...] = ("prose", "calls_results", "calls", "failed_calls_results", "earlier", "empty")


@dataclass
class Episode:
    """One first-user-turn episode as a rehearsal would show it, with its review."""

    messages: list[Message]  # system (if any), the first user message, then the turn's assistant/tool messages
    achieved: bool
    review: str  # "Achieved: yes|no" and one sentence
    wrong: ToolCall | None = None  # the failed call (failed episodes)

    def trajectory(self, task: Task) -> Trajectory:
        return Trajectory(task=task, prompt_index=0, sample_index=0, mode=Mode.REHEARSE, messages=list(self.messages))


@dataclass
class TTSRows:
    """What `tts_rows` gives the SFT: prompt/target token rows (review, memory) and tasks whose gold Act is
    to be trained under a block in the system prompt (act)."""

    notes: list[tuple[str, list[int], list[int]]] = field(default_factory=list)  # (kind, prompt ids, target ids)
    act_tasks: list[Task] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def check_training_tasks(tasks: list[Task]) -> None:
    """Raise when any task is tagged with a split other than train (module docstring)."""
    for t in tasks:
        split = t.meta.get("split")
        if split is not None and split != "train":
            raise ValueError(f"sft tts_prompts: task {t.uuid!r} is from split {split!r}; TTS-prompt rows are built "
                             "from training tasks only: point data at the train split (data.split=train or a "
                             "train file in data.path) or set tts_prompts=0")


def first_turn(task: Task) -> list[Message]:
    """System (if any), the first user message, and what follows it up to the next user message."""
    out: list[Message] = []
    seen_user = False
    for m in task.messages:
        if m.role == "user":
            if seen_user:
                break
            seen_user = True
        out.append(m)
    if not seen_user:
        raise ValueError(f"task {task.uuid!r} has no user message; SFT TTS rows need one")
    return out


def gold_calls(turn: list[Message]) -> list[ToolCall]:
    return [c for m in turn if m.role == "assistant" for c in m.tool_calls]


def gold_episode(task: Task) -> Episode:
    return Episode(first_turn(task), True, f"Achieved: yes\n{YES_FIX}")


def unknown_id_twin(call: ToolCall, rng: random.Random) -> ToolCall | None:
    """`call` with one string argument replaced by an id no world knows; None when it has no string argument."""
    keys = [k for k, v in call.arguments.items() if isinstance(v, str)]
    if not keys:
        return None
    key = rng.choice(keys)
    return ToolCall(call.name, {**call.arguments, key: f"zz-{rng.randrange(10**6):06d}"})


def failed_episode(task: Task, rng: random.Random) -> Episode | None:
    """The gold first turn up to one call, swapped for its unknown-id twin and answered by the real world; None
    when the task has no such call, no initial state, or the world does not answer with an error."""
    from envace.worlds.environment import WorldEnvironment

    turn = first_turn(task)
    spots = [(i, j) for i, m in enumerate(turn) if m.role == "assistant" for j in range(len(m.tool_calls))]
    if task.initial_state is None or not spots:
        return None
    i, j = rng.choice(spots)
    twin = unknown_id_twin(turn[i].tool_calls[j], rng)
    if twin is None:
        return None
    env = WorldEnvironment()
    env.reset(task)
    for c in [*gold_calls(turn[:i]), *turn[i].tool_calls[:j]]:
        _execute(env, c)
    obs = _execute(env, twin)
    if not is_error_value(obs.agent_value()):
        return None
    kept = [m for m in turn[i + 1: i + 1 + j] if m.role == "tool"]  # the gold answers of the calls before it
    msgs = [*turn[:i], Message(role="assistant", content="", tool_calls=[*turn[i].tool_calls[:j], twin]), *kept,
            Message(role="tool", content=obs.to_text(), name=twin.name)]
    gold = turn[i].tool_calls[j]
    fix = f"Next time call {call_line(1, gold)[3:]}."
    return Episode(msgs, False, f"Achieved: no\n{fix}", wrong=twin)


def memory_target(gold: Episode, failed: list[Episode], tok: Any, cap: int) -> str:
    """The note a memory prompt over `gold` and `failed` is trained to give (module docstring)."""
    calls = gold_calls(gold.messages)
    lines = [call_line(i, c) for i, c in enumerate(calls, 1)] or [NO_CALL]
    lines += [f"Avoid: {call_line(1, ep.wrong)[3:]}" for ep in failed if ep.wrong is not None]
    return bounded(lines, SimpleNamespace(tokenizer=tok), cap)[0]


def structured_note(task: Task, ep: Episode, tok: Any, cap: int, with_results: bool) -> str:
    """The calls_results / calls memory of `ep`, laid out as envace.tts.strategies lays it out."""
    lines = []
    for i, (call, result) in enumerate(rehearsal_calls(ep.trajectory(task)), 1):
        lines.append(call_line(i, call))
        if with_results:
            lines.append(f"   result: {result if result is not None else '(none)'}")
    return bounded(lines or [NO_CALL], SimpleNamespace(tokenizer=tok), cap)[0]


def _note_row(tok: Any, build, target: str, max_new: int, max_context: int, max_chars: int,
              enable_thinking: bool) -> tuple[list[int], list[int]] | None:
    """(prompt ids, target ids) with the prompt cropped as TTS crops it (max_chars, /2, ...) until prompt and
    `max_new` fit `max_context`; None when the target is over `max_new` tokens or nothing fits."""
    target_ids = encode_target(tok, target + END)
    if len(target_ids) > max_new + 1:  # + the end marker, which a generation's stop string covers
        return None
    chars = max_chars
    while chars >= 20:
        ids = chat_ids(tok, [{"role": "user", "content": build(chars)}], enable_thinking=enable_thinking)
        if len(ids) + max_new <= max_context:
            return ids, target_ids
        chars //= 2
    return None


def act_block(kind: str, task: Task, gold: Episode, failed: Episode | None, tok: Any, tts: TTSConfig) -> str | None:
    """The system-prompt block of an `act` row of kind `kind` (ACT_BLOCKS); None when it needs a failed episode
    and there is none."""
    cap = tts.memory_max_tokens
    if kind == "prose":
        return memory_note(memory_target(gold, [failed] if failed else [], tok, cap))
    if kind in ("calls_results", "calls"):
        return memory_note(structured_note(task, gold, tok, cap, kind == "calls_results"))
    if kind == "empty":
        return f"{MEMORY_HEADER}\n"
    if failed is None:
        return None
    if kind == "failed_calls_results":
        return memory_note(structured_note(task, failed, tok, cap, True))
    return earlier_attempts_note([imagined(failed.trajectory(task))], [failed.review], tts.transcript_max_chars)


def review_row(task: Task, ep: Episode, tok: Any, tts: TTSConfig,
               max_context: int) -> tuple[list[int], list[int]] | None:
    """The review row of `ep`: its verdict and fix, or the verdict alone when the fix is over the review cap."""
    request, trans = said_requests(ep.messages), imagined(ep.trajectory(task))
    args = (tts.assess_max_tokens, max_context, tts.transcript_max_chars, tts.enable_thinking)
    row = _note_row(tok, lambda c: assess_prompt(request, trans, c), ep.review, *args)
    if row is None and not ep.achieved:
        row = _note_row(tok, lambda c: assess_prompt(request, trans, c), "Achieved: no", *args)
    return row


def memory_row(task: Task, shown: list[Episode], gold: Episode, tok: Any, tts: TTSConfig,
               max_context: int) -> tuple[list[int], list[int]] | None:
    """The memory row over the attempts `shown` (the gold one among them), each with its review."""
    request = said_requests(gold.messages)
    trans = [imagined(e.trajectory(task)) for e in shown]
    reviews = [e.review for e in shown]
    target = memory_target(gold, [e for e in shown if not e.achieved], tok, tts.memory_max_tokens)
    return _note_row(tok, lambda c: memory_prompt(request, trans, reviews, tts.memory_words, max(c // len(shown), 20)),
                     target, tts.memory_max_tokens, max_context, tts.transcript_max_chars, tts.enable_thinking)


def tts_rows(tasks: list[Task], tok: Any, *, share: float, seed: int, tts: TTSConfig | None = None,
             max_context: int = 1024) -> TTSRows:
    """TTS-prompt rows for a `share` of `tasks` (each drawn with that probability, seeded by `seed` and the
    task's uuid). `tts`: the prompt settings the rows mirror (default TTSConfig()); `max_context`: the
    rollout's context limit the review and memory prompts are cropped to, as TTS crops them."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"tts_prompts={share}: a share of the demonstration tasks, 0..1 (0 = off)")
    out = TTSRows(counts={"review": 0, "memory": 0, "act": 0})
    if share == 0.0:
        return out
    check_training_tasks(tasks)
    tts = tts or TTSConfig()
    for task in tasks:
        rng = random.Random(f"{seed}|tts-prompts|{task.uuid}")
        if rng.random() >= share:
            continue
        gold = gold_episode(task)
        failed = [ep for _ in range(2) if (ep := failed_episode(task, rng)) is not None]
        # review: the gold episode or a failed one, half and half when there is a failed one
        row = review_row(task, failed[0] if failed and rng.random() < 0.5 else gold, tok, tts, max_context)
        if row is not None:
            out.notes.append(("review", *row))
            out.counts["review"] += 1
        # memory: 1-3 attempts in a random order, the gold one among them
        shown = [gold, *failed[: rng.randint(0, len(failed))]]
        rng.shuffle(shown)
        row = memory_row(task, shown, gold, tok, tts, max_context)
        if row is not None:
            out.notes.append(("memory", *row))
            out.counts["memory"] += 1
        # act: the gold conversation under one block
        kinds = [k for k in ACT_BLOCKS if failed or k in ("prose", "calls_results", "calls", "empty")]
        block = act_block(rng.choice(kinds), task, gold, failed[0] if failed else None, tok, tts)
        if block is not None:
            out.act_tasks.append(replace(task, messages=with_system_note(task.messages, block)))
            out.counts["act"] += 1
    return out
