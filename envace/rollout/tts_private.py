"""Test-time rehearsal (TTS), the private phase: N imagined Act + Rehearse episodes through the one state
machine (`run_rollout` in rehearse mode, token or chat engine), a self-assessment of each, and one bounded
rehearsal memory m_x. Shared by tts.py (tool world) and tts_chat.py (benchmarks).

No privilege: the phase sees only `private_view` of the task (the conversation said so far, on later turns
with the committed run's own calls and real results, and the tool schemas; no reference calls, checklists,
later user turns or initial state; Rehearse few-shot off) and is given no environment. `parallel` runs N
independent episodes, `sequential` shows episode i the transcripts and reviews of episodes 1..i-1. Each
episode is reviewed ("Achieved: yes/no" + a fix); the memory prompt turns them into m_x, capped at
`memory_max_tokens` generated tokens. Departures (the paper gives no more detail): the prompts are ours;
episodes ended by a limit or a rehearsed error are reviewed too; a review or memory prompt that cannot fit
the context is skipped and recorded in `skipped`.

Diagnostic only: `world` (an environment factory) turns the private episodes into env-mode episodes
against those environments, i.e. rehearsal with the world's true responses (the oracle bound of
envace.evaluation.tts_diagnosis). Its caller must hand a private copy, never the committed run's environment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import Field

from envace.config import BaseConfig, RolloutConfig
from envace.engines.base import GenerationEngine, GenRequest
from envace.roles.act import strip_end_markers
from envace.roles.rehearse import transcript
from envace.rollout.engine_prompts import prompt_of
from envace.rollout.machine import run_rollout
from envace.rollout.seeds import derive_seed
from envace.rollout.tts_prompts import (
    assess_prompt,
    earlier_attempts_note,
    memory_prompt,
    parse_achieved,
    with_system_note,
)
from envace.toolcall import strip_think
from envace.types import Environment, Message, Mode, Task, Trajectory

TTSMode = Literal["parallel", "sequential"]
TTS_MODES: tuple[str, ...] = ("parallel", "sequential")
REHEARSE_AT: tuple[str, ...] = ("first", "every")
MAX_N = 8


class TTSConfig(BaseConfig):
    """Settings of test-time rehearsal other than N and the mode (those are arguments)."""

    explore_temperature: float = Field(
        1.0, ge=0.0, le=10.0, description="Temperature of the private rehearsals (Act and Rehearse) and reviews.")
    commit_temperature: float | None = Field(
        None, ge=0.0, le=10.0, description="Act temperature of the committed run; None: the rollout config's "
        "(so N = 0 is exactly the plain run).")
    rehearse_at: Literal["first", "every"] = Field(
        "first", description="Rehearse before the first user message only, or at every new user message "
        "(the memory is carried forward).")
    assess_max_tokens: int = Field(48, ge=1, description="Most tokens of one self-assessment.")
    memory_max_tokens: int = Field(64, ge=1, description="Cap of the rehearsal memory m_x, in tokens.")
    memory_words: int = Field(60, ge=1, description="Word budget the memory prompt asks for.")
    transcript_max_chars: int = Field(
        1200, ge=40, description="Each transcript shown to a review / memory prompt is cropped to this.")
    enable_thinking: bool = Field(False, description="Let the model think before reviews and the memory.")


def check_tts(n: int, mode: str) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_N:
        raise ValueError(f"tts n={n!r}: N counts private rehearsals before the one committed run (0 = the plain "
                         f"run); use 0..{MAX_N}")
    if mode not in TTS_MODES:
        raise ValueError(f"tts mode {mode!r} is not one of {list(TTS_MODES)}")


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

    def summary(self) -> dict[str, Any]:
        """JSON-safe record (no trajectories)."""
        return {"user_turn": self.user_turn, "memory": self.memory, "memory_tokens": self.memory_tokens,
                "assessments": list(self.assessments), "achieved": list(self.achieved), "seeds": list(self.seeds),
                "skipped": list(self.skipped),
                "terminations": [t.termination.value if t.termination else None for t in self.rehearsals]}


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
                   max_new: int, temperature: float, cfg: RolloutConfig,
                   opts: TTSConfig) -> list[tuple[str, int] | None]:
    """One short generation per prompt builder, batched; None where the prompt cannot fit."""
    reqs: list[tuple[int, GenRequest]] = []
    for i, (build, seed) in enumerate(zip(builds, seeds)):
        fit = _fit(engine, build, opts.transcript_max_chars, max_new, cfg.max_context_tokens, opts.enable_thinking)
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


def _cap_words(text: str, limit: int) -> str:
    words = text.split()
    return text if len(words) <= limit else " ".join(words[:limit])


def rehearse_privately(views: list[Task], engine: GenerationEngine, cfg: RolloutConfig, *, n: int,
                       mode: TTSMode | str, seed: int, options: TTSConfig | None = None, step: int = 0,
                       enable_thinking: bool = True, memories: list[str] | None = None,
                       user_turns: list[int] | None = None,
                       world: Callable[[], Environment] | None = None) -> list[PrivatePhase]:
    """The private phase for each view (see `private_view`): N rehearsals, their reviews, the memory m_x.
    `memories[p]` is view p's memory from earlier user turns (shown to the memory prompt). `world`: the
    oracle bound (module docstring); None, the method: Rehearse writes every response."""
    check_tts(n, mode)
    opts = options or TTSConfig()
    phases = [PrivatePhase(user_turn=(user_turns[p] if user_turns else 0)) for p in range(len(views))]
    if n == 0 or not views:
        return phases
    prefixes = [v.messages for v in views]
    private_cfg = cfg.model_copy(update={
        "act": cfg.act.model_copy(update={"temperature": opts.explore_temperature}),
        "rehearse": cfg.rehearse.model_copy(update={"temperature": opts.explore_temperature}),
        "few_shot": False})  # no reference (call, response) pairs in the Rehearse prompt
    common = dict(policy=engine, cfg=private_cfg, mode=Mode.REHEARSE if world is None else Mode.ENV,
                  env_factory=world, step=step, rehearse_style=cfg.rehearse_style, enable_thinking=enable_thinking)
    if mode == "parallel":
        rseed = derive_seed(seed, "tts-private")
        trajs = run_rollout(views, k=n, seed=rseed, prefixes=prefixes, **common)
        for t in trajs:
            phases[t.prompt_index].seeds.append(rseed)
        _review(engine, phases, views, trajs, seed, cfg, opts)
    else:
        for i in range(n):
            shown = [p if i == 0 else with_system_note(p, earlier_attempts_note(
                [imagined(r) for r in ph.rehearsals], ph.assessments, opts.transcript_max_chars))
                for p, ph in zip(prefixes, phases)]
            rseed = derive_seed(seed, "tts-private", i)
            trajs = run_rollout(views, k=1, seed=rseed, prefixes=shown, **common)
            for t in trajs:
                t.sample_index = i
                phases[t.prompt_index].seeds.append(rseed)
            _review(engine, phases, views, trajs, seed, cfg, opts)
    earlier = memories or [""] * len(views)
    builds = [lambda chars, ph=ph, v=v, m=m: memory_prompt(
        said_requests(v.messages), [imagined(r) for r in ph.rehearsals], ph.assessments,
        opts.memory_words, max(chars // max(len(ph.rehearsals), 1), 20), earlier=m)
        for v, ph, m in zip(views, phases, earlier)]
    notes = generate_notes(engine, builds, [derive_seed(seed, "tts-memory", p) for p in range(len(views))],
                           max_new=opts.memory_max_tokens, temperature=opts.explore_temperature, cfg=cfg, opts=opts)
    for ph, note in zip(phases, notes):
        if note is None:
            ph.skipped.append("memory")
        ph.memory, ph.memory_tokens = note if note else ("", 0)
        ph.memory = _cap_words(ph.memory, opts.memory_max_tokens)  # chat engines report no token count
    return phases


def _review(engine: GenerationEngine, phases: list[PrivatePhase], views: list[Task], trajs: list[Trajectory],
            seed: int, cfg: RolloutConfig, opts: TTSConfig) -> None:
    """Self-assess each rehearsal (owned by phases[traj.prompt_index]) and record it."""
    builds, seeds = [], []
    for traj in trajs:
        v, p = views[traj.prompt_index], traj.prompt_index
        request, text = said_requests(v.messages), imagined(traj)
        builds.append(lambda chars, r=request, t=text: assess_prompt(r, t, chars))
        seeds.append(derive_seed(seed, "tts-assess", p, len(phases[p].assessments) + traj.sample_index))
    notes = generate_notes(engine, builds, seeds, max_new=opts.assess_max_tokens,
                           temperature=opts.explore_temperature, cfg=cfg, opts=opts)
    for traj, note in zip(trajs, notes):
        ph = phases[traj.prompt_index]
        ph.rehearsals.append(traj)
        if note is None:
            ph.skipped.append(f"assessment {len(ph.assessments) + 1}")
        ph.assessments.append(note[0] if note else "")
        ph.achieved.append(parse_achieved(note[0]) if note else None)
