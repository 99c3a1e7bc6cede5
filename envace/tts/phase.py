"""Records of test-time rehearsal's private phase and what a memory strategy reads and returns.

- `private_view`: what the private phase may know of a task (the conversation said so far and the tool
  schemas, built fresh so no other field can leak).
- `PrivatePhase`: one conversation's private phase at one user turn (its rehearsals, reviews, memory and,
  under `best_of_n`, the Act output the committed run replays).
- `MemoryInputs` / `Memory`: the one signature of every memory strategy (envace.tts.strategies):
  `strategy(inputs) -> [Memory per view]`. The inputs hold no environment.
- `generate_notes`: one short batched generation per prompt (reviews, the prose memory), each prompt
  cropped until it fits the context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from envace.config import RolloutConfig
from envace.engines.base import GenerationEngine, GenRequest
from envace.roles.act import strip_end_markers
from envace.roles.rehearse import transcript
from envace.rollout.engine_prompts import prompt_of
from envace.toolcall import strip_think
from envace.types import Message, Task, Trajectory, Turn


@dataclass
class PrivatePhase:
    """The private phase of one conversation at one user turn; no real environment took part."""

    user_turn: int
    rehearsals: list[Trajectory] = field(default_factory=list)
    assessments: list[str] = field(default_factory=list)
    achieved: list[bool | None] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)  # rollout seed of each rehearsal
    memory: str = ""
    memory_tokens: int = 0
    skipped: list[str] = field(default_factory=list)  # generations that did not fit the context
    strategy: str = "prose"
    chosen: int | None = None  # the rehearsal the strategy picked (the structured ones and best_of_n)
    replay: Turn | None = None  # best_of_n: the Act output the committed run starts this user turn with

    def summary(self) -> dict[str, Any]:
        """JSON-safe record (no trajectories)."""
        return {"user_turn": self.user_turn, "memory": self.memory, "memory_tokens": self.memory_tokens,
                "assessments": list(self.assessments), "achieved": list(self.achieved), "seeds": list(self.seeds),
                "skipped": list(self.skipped), "strategy": self.strategy, "chosen": self.chosen,
                "replay": self.replay.text if self.replay is not None else None,
                "terminations": [t.termination.value if t.termination else None for t in self.rehearsals]}


@dataclass
class Memory:
    """What a memory strategy returns for one view."""

    text: str = ""  # m_x, the note of the committed run's system prompt ("" = no note)
    tokens: int = 0  # its length in the unit of the cap (tokens; words on a chat-level engine)
    chosen: int | None = None  # index of the rehearsal it is built from, when one was picked
    replay: Turn | None = None  # an Act output for the committed run to start with (best_of_n)
    skipped: bool = False  # the memory prompt could not fit the context


@dataclass
class MemoryInputs:
    """Everything a memory strategy may read: the private phases (rehearsals and reviews), never an
    environment. `phases[p]` belongs to `views[p]`; `earlier[p]` is view p's memory from earlier user turns."""

    views: list[Task]
    phases: list[PrivatePhase]
    earlier: list[str]
    engine: GenerationEngine
    cfg: RolloutConfig
    seed: int
    max_tokens: int  # the cap of m_x (TTSConfig.memory_max_tokens)
    words: int  # the word budget a prose memory prompt asks for (TTSConfig.memory_words)
    max_chars: int  # transcripts shown to a prompt are cropped to this (TTSConfig.transcript_max_chars)
    temperature: float  # of generated notes (TTSConfig.explore_temperature)
    enable_thinking: bool = False


def private_view(task: Task, said: list[Message]) -> Task:
    """What the private phase may know of `task`: the conversation said so far (ending with the current
    user message) and the tool schemas. Built fresh, so no other field of the task can leak."""
    if not said or said[-1].role != "user":
        raise ValueError("private_view needs the conversation so far, ending with the user message to answer")
    return Task(uuid=task.uuid, tools=list(task.tools), messages=[replace(m) for m in said], domain=task.domain)


def said_requests(messages: list[Message]) -> str:
    return "\n".join(m.content for m in messages if m.role == "user")


def imagined(traj: Trajectory) -> str:
    """Transcript of what a rehearsal imagined: from the user message it answered (its last user
    message: a private episode answers one user message) to its end."""
    last = max((i for i, m in enumerate(traj.messages) if m.role == "user"), default=0)
    return transcript(traj.messages[last:])


def _fit(engine: GenerationEngine, build: Callable[[int], str], max_chars: int, max_new: int, limit: int,
         enable_thinking: bool) -> tuple[list[int], list[dict[str, Any]] | None] | None:
    """Prompt of `build(chars)` for the largest of max_chars, /2, /4, ... that fits the context."""
    chars = max_chars
    while chars >= 20:
        ids, chat, n_tokens = prompt_of(engine, [{"role": "user", "content": build(chars)}], None,
                                        enable_thinking=enable_thinking)
        if n_tokens + max_new <= limit:
            return ids, chat
        chars //= 2
    return None


def generate_notes(engine: GenerationEngine, builds: list[Callable[[int], str]], seeds: list[int], *,
                   max_new: int, temperature: float, cfg: RolloutConfig, max_chars: int,
                   enable_thinking: bool) -> list[tuple[str, int] | None]:
    """One short generation per prompt builder, batched: (text, tokens), or None where the prompt cannot fit."""
    reqs: list[tuple[int, GenRequest]] = []
    for i, (build, seed) in enumerate(zip(builds, seeds)):
        fit = _fit(engine, build, max_chars, max_new, cfg.max_context_tokens, enable_thinking)
        if fit is not None:
            reqs.append((i, GenRequest(prompt_ids=fit[0], messages=fit[1], temperature=temperature,
                                       top_p=cfg.act.top_p, max_new_tokens=max_new, stop=["<|im_end|>"], seed=seed)))
    out: list[tuple[str, int] | None] = [None] * len(builds)
    if reqs:
        results = engine.generate([r for _, r in reqs])
        if len(results) != len(reqs):
            raise RuntimeError(f"{type(engine).__name__}.generate returned {len(results)} results for "
                               f"{len(reqs)} requests")
        for (i, _), res in zip(reqs, results):
            text = strip_end_markers(strip_think(res.text)).strip()
            out[i] = (text, len(res.token_ids) or len(text.split()))
    return out


def cap_words(text: str, limit: int) -> str:
    words = text.split()
    return text if len(words) <= limit else " ".join(words[:limit])
