"""Test-time rehearsal (TTS), token level: N-1 private rehearsals, a rehearsal memory, ONE committed run.

For each task x:
1. Private phase (`rehearse_privately`): N-1 full Act + Rehearse episodes (`run_rollout` in rehearse
   mode: the policy writes every observation), sampled at the explore temperature (paper: 1.0).
   - parallel: independent episodes, one rollout with k = N-1, so each has its own derived seed;
   - sequential: one episode at a time; attempt i sees attempts 1..i-1 (their transcripts and reviews)
     in its system prompt, so it can avoid repeating a failure.
   After each episode the policy reviews it (self-assessment + fix, tts_prompts.ASSESS_PROMPT); then
   it writes the memory m_x from all episodes and reviews, capped at `memory_max_tokens` tokens (the
   generation limit, so the cap is exact).
2. Committed phase: `run_rollout` in env mode on x with m_x appended to the system prompt, at the commit
   temperature (paper: 0.01), seeded with `seed` itself, so N = 1 (no rehearsal, no memory) is exactly
   a plain env-mode run with that seed.

Isolation is structural: `rehearse_privately` takes no environment argument and nothing it calls
receives one; `tts_rollout` passes `env_factory` to the committed `run_rollout` only after the private
phase has returned, so no real environment exists while the policy rehearses.

Departures (the paper gives no more detail): N counts attempts, i.e. N-1 rehearsals + 1 commit (N = 1:
none); the prompts of the review and the memory are ours; rehearsals that end on a limit or a rehearsed
error are still reviewed and summarised; a review or memory prompt that cannot fit the context even with
cropped transcripts is skipped (empty text, recorded in `skipped`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import Field

from envace.config import BaseConfig, RolloutConfig
from envace.engines.base import GenerationEngine, GenRequest
from envace.roles.act import chat_ids, strip_end_markers
from envace.roles.rehearse import transcript
from envace.rollout.machine import run_rollout
from envace.rollout.seeds import derive_seed
from envace.rollout.tts_prompts import (
    add_to_system,
    assess_prompt,
    earlier_attempts_note,
    memory_note,
    memory_prompt,
    parse_achieved,
)
from envace.toolcall import strip_think
from envace.types import Environment, Message, Mode, Task, Trajectory

TTSMode = Literal["parallel", "sequential"]
TTS_MODES: tuple[str, ...] = ("parallel", "sequential")
MAX_N = 8


class TTSConfig(BaseConfig):
    """Settings of test-time rehearsal other than N and the mode (those are arguments)."""

    explore_temperature: float = Field(
        1.0, ge=0.0, le=10.0, description="Temperature of the private rehearsals (Act and Rehearse) and reviews.")
    commit_temperature: float = Field(0.01, ge=0.0, le=10.0, description="Act temperature of the committed run.")
    assess_max_tokens: int = Field(48, ge=1, description="Most tokens of one self-assessment.")
    memory_max_tokens: int = Field(64, ge=1, description="Cap of the rehearsal memory m_x, in tokens.")
    memory_words: int = Field(60, ge=1, description="Word budget the memory prompt asks for.")
    transcript_max_chars: int = Field(
        1200, ge=40, description="Each transcript shown to a review / memory prompt is cropped to this.")
    enable_thinking: bool = Field(False, description="Let the model think before reviews and the memory.")


def check_tts(n: int, mode: str) -> None:
    if not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise ValueError(f"tts n={n!r}: N counts attempts (N-1 private rehearsals + 1 committed run); use 1..{MAX_N}")
    if mode not in TTS_MODES:
        raise ValueError(f"tts mode {mode!r} is not one of {list(TTS_MODES)}")


@dataclass
class PrivatePhase:
    """Everything the policy did in private for one task; no real environment took part."""

    task_index: int
    rehearsals: list[Trajectory] = field(default_factory=list)
    assessments: list[str] = field(default_factory=list)
    achieved: list[bool | None] = field(default_factory=list)
    memory: str = ""
    memory_tokens: int = 0
    seeds: list[int] = field(default_factory=list)  # rollout seed of each rehearsal
    skipped: list[str] = field(default_factory=list)  # generations that did not fit the context


def request_text(task: Task) -> str:
    return "\n".join(task.user_turns)


def with_system_note(task: Task, note: str) -> Task:
    """A copy of `task` whose system prompt ends with `note` (the reference conversation is untouched
    otherwise, so Rehearse few-shot and the replayed user turns stay the same)."""
    msgs = list(task.messages)
    if msgs and msgs[0].role == "system":
        msgs[0] = Message(role="system", content=add_to_system(msgs[0].content, note))
    else:
        msgs.insert(0, Message(role="system", content=note))
    return replace(task, messages=msgs)


def _sampling(cfg: RolloutConfig, act_t: float, rehearse_t: float | None = None) -> RolloutConfig:
    upd: dict[str, Any] = {"act": cfg.act.model_copy(update={"temperature": act_t})}
    if rehearse_t is not None:
        upd["rehearse"] = cfg.rehearse.model_copy(update={"temperature": rehearse_t})
    return cfg.model_copy(update=upd)


def _fit_prompt(tokenizer: Any, build: Callable[[int], str], max_chars: int, max_new: int, limit: int,
                enable_thinking: bool) -> list[int] | None:
    """Prompt ids of `build(chars)` for the largest of max_chars, /2, /4, ... that fits the context."""
    chars = max_chars
    while chars >= 20:
        ids = chat_ids(tokenizer, [{"role": "user", "content": build(chars)}], enable_thinking=enable_thinking)
        if len(ids) + max_new <= limit:
            return ids
        chars //= 2
    return None


def _generate_notes(engine: GenerationEngine, builds: list[Callable[[int], str]], seeds: list[int], *,
                    max_new: int, temperature: float, cfg: RolloutConfig,
                    opts: TTSConfig) -> list[tuple[str, int] | None]:
    """One short generation per prompt builder, batched; None where the prompt cannot fit."""
    reqs: list[tuple[int, GenRequest]] = []
    for i, (build, seed) in enumerate(zip(builds, seeds)):
        ids = _fit_prompt(engine.tokenizer, build, opts.transcript_max_chars, max_new, cfg.max_context_tokens,
                          opts.enable_thinking)
        if ids is not None:
            reqs.append((i, GenRequest(prompt_ids=ids, temperature=temperature, top_p=cfg.act.top_p,
                                       max_new_tokens=max_new, stop=["<|im_end|>"], seed=seed)))
    out: list[tuple[str, int] | None] = [None] * len(builds)
    if reqs:
        results = engine.generate([r for _, r in reqs])
        if len(results) != len(reqs):
            raise RuntimeError(f"{type(engine).__name__}.generate returned {len(results)} results for "
                               f"{len(reqs)} requests")
        for (i, _), res in zip(reqs, results):
            out[i] = (strip_end_markers(strip_think(res.text)).strip(), len(res.token_ids))
    return out


def _review(engine: GenerationEngine, phases: list[PrivatePhase], tasks: list[Task], trajs: list[Trajectory],
            owners: list[int], seed: int, cfg: RolloutConfig, opts: TTSConfig) -> None:
    """Self-assess each rehearsal in `trajs` (owned by phases[owners[j]]) and record it."""
    builds, seeds = [], []
    for traj, p in zip(trajs, owners):
        request, text = request_text(tasks[p]), transcript(traj.messages)
        builds.append(lambda chars, r=request, t=text: assess_prompt(r, t, chars))
        seeds.append(derive_seed(seed, "tts-assess", p, len(phases[p].assessments)))
    notes = _generate_notes(engine, builds, seeds, max_new=opts.assess_max_tokens,
                            temperature=opts.explore_temperature, cfg=cfg, opts=opts)
    for traj, p, note in zip(trajs, owners, notes):
        ph = phases[p]
        ph.rehearsals.append(traj)
        if note is None:
            ph.skipped.append(f"assessment {len(ph.assessments) + 1}")
        ph.assessments.append(note[0] if note else "")
        ph.achieved.append(parse_achieved(note[0]) if note else None)


def rehearse_privately(tasks: list[Task], policy_engine: GenerationEngine, cfg: RolloutConfig, *, n: int,
                       mode: TTSMode | str, seed: int, options: TTSConfig | None = None, step: int = 0,
                       enable_thinking: bool = True) -> list[PrivatePhase]:
    """The private phase for every task: N-1 rehearsals, their reviews, the memory m_x.

    Takes no environment: the rehearsals run in rehearse mode, where `run_rollout` creates none.
    """
    check_tts(n, mode)
    opts = options or TTSConfig()
    phases = [PrivatePhase(task_index=p) for p in range(len(tasks))]
    if n == 1 or not tasks:
        return phases
    private_cfg = _sampling(cfg, opts.explore_temperature, opts.explore_temperature)
    common = dict(policy=policy_engine, cfg=private_cfg, mode=Mode.REHEARSE, step=step,
                  rehearse_style=cfg.rehearse_style, enable_thinking=enable_thinking)
    if mode == "parallel":
        rseed = derive_seed(seed, "tts-private")
        trajs = run_rollout(tasks, k=n - 1, seed=rseed, **common)
        for t in trajs:
            phases[t.prompt_index].seeds.append(rseed)
        _review(policy_engine, phases, tasks, trajs, [t.prompt_index for t in trajs], seed, cfg, opts)
    else:
        for attempt in range(n - 1):
            shown = [task if attempt == 0 else with_system_note(task, earlier_attempts_note(
                [transcript(r.messages) for r in ph.rehearsals], ph.assessments, opts.transcript_max_chars))
                for task, ph in zip(tasks, phases)]
            rseed = derive_seed(seed, "tts-private", attempt)
            trajs = run_rollout(shown, k=1, seed=rseed, **common)
            for t in trajs:
                t.sample_index = attempt
                phases[t.prompt_index].seeds.append(rseed)
            _review(policy_engine, phases, tasks, trajs, [t.prompt_index for t in trajs], seed, cfg, opts)
    builds = [lambda chars, ph=ph, task=task: memory_prompt(
        request_text(task), [transcript(r.messages) for r in ph.rehearsals], ph.assessments, opts.memory_words,
        max(chars // max(len(ph.rehearsals), 1), 20)) for task, ph in zip(tasks, phases)]
    notes = _generate_notes(policy_engine, builds, [derive_seed(seed, "tts-memory", p) for p in range(len(tasks))],
                            max_new=opts.memory_max_tokens, temperature=opts.explore_temperature, cfg=cfg, opts=opts)
    for ph, note in zip(phases, notes):
        if note is None:
            ph.skipped.append("memory")
        ph.memory, ph.memory_tokens = note if note else ("", 0)
    return phases


def commit_task(task: Task, phase: PrivatePhase) -> Task:
    """The task as the committed run sees it: m_x appended to the system prompt (unchanged without one)."""
    return with_system_note(task, memory_note(phase.memory)) if phase.memory else task


def tts_summary(phase: PrivatePhase, n: int, mode: str) -> dict[str, Any]:
    """JSON-safe record of the private phase (for reward_breakdown / the store)."""
    return {"n": n, "mode": mode, "memory": phase.memory, "memory_tokens": phase.memory_tokens,
            "assessments": list(phase.assessments), "achieved": list(phase.achieved), "seeds": list(phase.seeds),
            "skipped": list(phase.skipped),
            "private_terminations": [t.termination.value if t.termination else None for t in phase.rehearsals]}


def tts_rollout(tasks: list[Task], policy_engine: GenerationEngine, cfg: RolloutConfig, n: int,
                mode: TTSMode | str, env_factory: Callable[[], Environment], seed: int, *,
                options: TTSConfig | None = None, step: int = 0, enable_thinking: bool = True) -> list[Trajectory]:
    """Private rehearsals, then one committed env-mode episode per task (ordered like `tasks`).

    Each committed trajectory carries `traj.tts` = summary + {"private": [Trajectory, ...]} (save those
    with store mode tts-private, the committed one with tts-commit) and the same summary without the
    trajectories in `traj.reward_breakdown["tts"]` (re-add it after a scorer replaces the breakdown).
    """
    check_tts(n, mode)
    if env_factory is None:
        raise ValueError("tts_rollout needs env_factory: the committed run executes in the real environment")
    opts = options or TTSConfig()
    phases = rehearse_privately(tasks, policy_engine, cfg, n=n, mode=mode, seed=seed, options=opts, step=step,
                                enable_thinking=enable_thinking)
    # Only now may a real environment exist: run_rollout calls env_factory when the episodes start.
    commits = run_rollout([commit_task(t, ph) for t, ph in zip(tasks, phases)], k=1, policy=policy_engine,
                          cfg=_sampling(cfg, opts.commit_temperature), mode=Mode.ENV, env_factory=env_factory,
                          step=step, seed=seed, rehearse_style=cfg.rehearse_style, enable_thinking=enable_thinking)
    for traj, ph in zip(commits, phases):
        summary = tts_summary(ph, n, mode)
        traj.tts = {**summary, "private": list(ph.rehearsals)}
        traj.reward_breakdown["tts"] = summary
    return commits
