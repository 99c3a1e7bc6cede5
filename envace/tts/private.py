"""Test-time rehearsal (TTS), the private phase: N imagined Act + Rehearse episodes through the one state
machine (`run_rollout` in rehearse mode, token or chat engine), a self-assessment of each, and what the
committed run is given, made by the configured memory strategy (envace.tts.strategies). Shared by
envace.tts.rollout (tool world) and envace.tts.chat (benchmarks).

No privilege: the phase sees only `private_view` of the task (the conversation said so far, on later turns
with the committed run's own calls and real results, and the tool schemas; no reference calls, checklists,
later user turns or initial state; Rehearse few-shot off) and is given no environment. `parallel` runs N
independent episodes, `sequential` shows episode i the transcripts and reviews of episodes 1..i-1. Each
episode is reviewed ("Achieved: yes/no" + a fix). Departures (the paper gives no more detail): the prompts
are ours; episodes ended by a limit or a rehearsed error are reviewed too; a review or memory prompt that
cannot fit the context is skipped and recorded in `skipped`.

`tts.engine=simulator`: the private episodes run in simulator mode, their tool responses written by
`simulator` (a frozen engine asked with the prompted simulator's prompt and read by its lenient parser,
envace.rollout.simulator_seat) instead of the policy's Rehearse role; Act, reviews and the memory stay the
policy's. The simulator is no environment: it sees the same private view and nothing more.

Diagnostic only: `world` (an environment factory) turns the private episodes into env-mode episodes
against those environments, i.e. rehearsal with the world's true responses (the oracle bound of
envace.evaluation.tts_diagnosis). Its caller must hand a private copy, never the committed run's environment.
"""

from __future__ import annotations

from collections.abc import Callable

from envace.config import RolloutConfig
from envace.engines.base import GenerationEngine
from envace.rollout.machine import run_rollout
from envace.rollout.seeds import derive_seed
from envace.tts.config import TTSConfig, TTSMode
from envace.tts.phase import MemoryInputs, PrivatePhase, generate_notes, imagined, said_requests
from envace.tts.prompts import assess_prompt, earlier_attempts_note, parse_achieved, with_system_note
from envace.tts.strategies import memory_strategy
from envace.types import Environment, Mode, Task, Trajectory


def rehearse_privately(views: list[Task], engine: GenerationEngine, cfg: RolloutConfig, tts: TTSConfig, *,
                       seed: int, step: int = 0, enable_thinking: bool = True, memories: list[str] | None = None,
                       user_turns: list[int] | None = None,
                       world: Callable[[], Environment] | None = None,
                       simulator: GenerationEngine | None = None) -> list[PrivatePhase]:
    """The private phase for each view (see `private_view`): `tts.n` rehearsals, their reviews, the memory.
    `memories[p]` is view p's memory from earlier user turns (shown to the prose memory prompt). `world`: the
    oracle bound (module docstring); None, the method: Rehearse writes every response, or with
    `tts.engine=simulator` the prompted `simulator` engine does."""
    if (tts.engine == "simulator") != (simulator is not None):
        raise ValueError(f"tts.engine={tts.engine!r} but {'no' if simulator is None else 'a'} simulator engine was "
                         "given; the simulator seat needs both (tts.engine=simulator and a `simulator` model slot)")
    if simulator is not None and world is not None:
        raise ValueError("the private phase takes one source of responses: the oracle world or the simulator")
    phases = [PrivatePhase(user_turn=(user_turns[p] if user_turns else 0), strategy=tts.memory)
              for p in range(len(views))]
    if tts.n == 0 or not views:
        return phases
    prefixes = [v.messages for v in views]
    private_cfg = cfg.model_copy(update={
        "act": cfg.act.model_copy(update={"temperature": tts.explore_temperature}),
        "rehearse": cfg.rehearse.model_copy(update={"temperature": tts.explore_temperature}),
        "few_shot": False, "simulator_prompt": "prompted"})  # no reference (call, response) pairs in any prompt
    mode = Mode.ENV if world is not None else Mode.SIMULATOR if simulator is not None else Mode.REHEARSE
    common = dict(policy=engine, cfg=private_cfg, mode=mode, env_factory=world, simulator=simulator, step=step,
                  rehearse_style=cfg.rehearse_style, enable_thinking=enable_thinking)
    if tts.mode is TTSMode.PARALLEL:
        rseed = derive_seed(seed, "tts-private")
        trajs = run_rollout(views, k=tts.n, seed=rseed, prefixes=prefixes, **common)
        for t in trajs:
            phases[t.prompt_index].seeds.append(rseed)
        _review(engine, phases, views, trajs, seed, cfg, tts)
    else:
        for i in range(tts.n):
            shown = [p if i == 0 else with_system_note(p, earlier_attempts_note(
                [imagined(r) for r in ph.rehearsals], ph.assessments, tts.transcript_max_chars))
                for p, ph in zip(prefixes, phases)]
            rseed = derive_seed(seed, "tts-private", i)
            trajs = run_rollout(views, k=1, seed=rseed, prefixes=shown, **common)
            for t in trajs:
                t.sample_index = i
                phases[t.prompt_index].seeds.append(rseed)
            _review(engine, phases, views, trajs, seed, cfg, tts)
    inputs = MemoryInputs(views=views, phases=phases, earlier=memories or [""] * len(views), engine=engine, cfg=cfg,
                          seed=seed, max_tokens=tts.memory_max_tokens, words=tts.memory_words,
                          max_chars=tts.transcript_max_chars, temperature=tts.explore_temperature,
                          enable_thinking=tts.enable_thinking)
    made = memory_strategy(tts.memory)(inputs)
    if len(made) != len(phases):
        raise RuntimeError(f"TTS memory strategy {tts.memory!r} returned {len(made)} memories for {len(phases)} "
                           "conversations; a strategy returns one per view")
    for ph, mem in zip(phases, made):
        if mem.skipped:
            ph.skipped.append("memory")
        ph.memory, ph.memory_tokens, ph.chosen, ph.replay = mem.text, mem.tokens, mem.chosen, mem.replay
    return phases


def _review(engine: GenerationEngine, phases: list[PrivatePhase], views: list[Task], trajs: list[Trajectory],
            seed: int, cfg: RolloutConfig, tts: TTSConfig) -> None:
    """Self-assess each rehearsal (owned by phases[traj.prompt_index]) and record it."""
    builds, seeds = [], []
    for traj in trajs:
        v, p = views[traj.prompt_index], traj.prompt_index
        request, text = said_requests(v.messages), imagined(traj)
        builds.append(lambda chars, r=request, t=text: assess_prompt(r, t, chars))
        seeds.append(derive_seed(seed, "tts-assess", p, len(phases[p].assessments) + traj.sample_index))
    notes = generate_notes(engine, builds, seeds, max_new=tts.assess_max_tokens, temperature=tts.explore_temperature,
                           cfg=cfg, max_chars=tts.transcript_max_chars, enable_thinking=tts.enable_thinking)
    for traj, note in zip(trajs, notes):
        ph = phases[traj.prompt_index]
        ph.rehearsals.append(traj)
        if note is None:
            ph.skipped.append(f"assessment {len(ph.assessments) + 1}")
        ph.assessments.append(note[0] if note else "")
        ph.achieved.append(parse_achieved(note[0]) if note else None)
