"""Test-time rehearsal (TTS), token level (the tool world): N private rehearsals, a rehearsal memory m_x,
then exactly ONE committed execution in the real environment with m_x in its system prompt.

`tts_rollout` runs, for each of k attempts per task, a private phase (`envace.tts.private.rehearse_privately`
on the conversation said so far: N parallel or sequential rehearsals, reviews, the memory) and then the
committed `run_rollout` in env mode. N = 0 is exactly the plain env-mode run with the same seed, and the
committed run of attempt a at every N samples with the seeds of that run's sample a (common random numbers:
N vs 0 differs only by what the memory strategy gave it); with `rehearse_at="every"` each later user message
triggers a new private phase whose memory replaces the note. Under `best_of_n` the committed engine is a
`ReplayEngine`: the request that opens the rehearsed user turn (found by its seed) is answered with the
chosen rehearsal's first Act output instead of a new sample (its ids and log-probs as sampled in the
rehearsal); every other request goes to the policy.
Isolation is structural: no private phase is given an environment, and for the first user message
`env_factory` reaches `run_rollout` only after the private phase has returned.
Records: `traj.tts` on committed and private trajectories (see `tts_rollout`); `envace.store.tts` links them.
`private_world` (diagnostic only, envace.evaluation.tts_diagnosis): the private episodes run against private
copies of the world instead of Rehearse, the oracle bound; never the committed run's `env_factory`.
`simulator` (with `tts.engine=simulator`): the engine that writes the private episodes' tool responses in place
of the policy's Rehearse role (envace.tts.private); the committed run never asks it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from envace.config import RolloutConfig
from envace.engines.base import GenerationEngine, GenRequest, GenResult
from envace.rollout.machine import run_rollout
from envace.rollout.seeds import derive_seed, generation_seed
from envace.rollout.state import EpisodeState
from envace.tts.config import TTSConfig
from envace.tts.phase import PrivatePhase, private_view
from envace.tts.private import rehearse_privately
from envace.tts.prompts import add_to_system, memory_note, with_system_note
from envace.types import Environment, Message, Mode, Role, Task, Trajectory, Turn


def first_view(task: Task) -> Task:
    """The private view of a task before its first user message is answered."""
    said = ([Message(role="system", content=task.system_prompt)] if task.system_prompt is not None else [])
    return private_view(task, said + [Message(role="user", content=task.user_turns[0])])


def commit_task(task: Task, memory: str) -> Task:
    """The task as the committed run sees it: m_x appended to the system prompt (unchanged without one)."""
    if not memory:
        return task
    return replace(task, messages=with_system_note(task.messages, memory_note(memory)))


class ReplayEngine:
    """The committed run's engine: a request whose seed is in `replies` is answered once with that recorded
    Act output, every other request by `engine` (best_of_n; module docstring)."""

    def __init__(self, engine: GenerationEngine) -> None:
        self.engine, self.tokenizer = engine, engine.tokenizer
        self.chat = bool(getattr(engine, "chat", False))
        self.replies: dict[int, GenResult] = {}

    def __getattr__(self, name: str) -> Any:  # count_tokens of chat engines and the like
        if name == "engine":  # not set yet (a copy under construction)
            raise AttributeError(name)
        return getattr(self.engine, name)

    def add(self, seed: int, turn: Turn) -> None:
        self.replies[seed] = GenResult(token_ids=list(turn.response_ids), logprobs=list(turn.logprobs),
                                       text=turn.text, meta={"replayed": True})

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        out: list[GenResult | None] = [self.replies.pop(r.seed, None) if r.seed is not None else None
                                       for r in requests]
        rest = [i for i, res in enumerate(out) if res is None]
        if rest:
            for i, res in zip(rest, self.engine.generate([requests[i] for i in rest])):
                out[i] = res
        return out  # type: ignore[return-value]


def _set_memory(st: EpisodeState, base_system: str | None, memory: str) -> None:
    """Replace the memory note in an ongoing episode's system prompt."""
    content = add_to_system(base_system, memory_note(memory)) if memory else (base_system or "")
    if st.history and st.history[0].role == "system":
        st.history[0] = Message(role="system", content=content)
    elif content:
        st.history.insert(0, Message(role="system", content=content))


def _link(phase: PrivatePhase, tts: TTSConfig, attempt: int) -> None:
    for i, (traj, assessment, achieved, seed) in enumerate(zip(phase.rehearsals, phase.assessments, phase.achieved,
                                                              phase.seeds)):
        traj.tts = {"role": "private", "n": tts.n, "mode": tts.mode.value, "attempt": attempt, "index": i,
                    "user_turn": phase.user_turn, "assessment": assessment, "achieved": achieved,
                    "memory": phase.memory, "seed": seed}


def _attempt(tasks: list[Task], engine: GenerationEngine, cfg: RolloutConfig, commit_cfg: RolloutConfig,
             tts: TTSConfig, env_factory: Callable[[], Environment], attempt: int, seed: int, step: int,
             enable_thinking: bool, commit_seed: int,
             private_world: Callable[[], Environment] | None,
             simulator: GenerationEngine | None = None) -> list[Trajectory]:
    private = dict(step=step, enable_thinking=enable_thinking, world=private_world, simulator=simulator)
    first = rehearse_privately([first_view(t) for t in tasks], engine, cfg, tts,
                               seed=derive_seed(seed, "tts-private", 0), **private)
    phases: list[list[PrivatePhase]] = [[ph] for ph in first]
    committed = ReplayEngine(engine)
    for p, ph in enumerate(first):  # the committed episode of task p is sample `attempt`; its first Act request
        if ph.replay is not None:
            committed.add(generation_seed(commit_seed, step, p, attempt, Role.ACT, 0), ph.replay)
    rounds = [0]

    def on_user_turn(states: list[EpisodeState]) -> None:
        # a new user message was said in these committed episodes: rehearse it from what is said so far
        rounds[0] += 1
        views = [private_view(tasks[st.traj.prompt_index], list(st.history)) for st in states]
        got = rehearse_privately(views, engine, cfg, tts, seed=derive_seed(seed, "tts-private", rounds[0]),
                                 memories=[phases[st.traj.prompt_index][-1].memory for st in states],
                                 user_turns=[st.user_turn for st in states], **private)
        for st, ph in zip(states, got):
            mine = phases[st.traj.prompt_index]
            memory = ph.memory or mine[-1].memory  # a skipped memory keeps the earlier one
            mine.append(ph)
            _set_memory(st, tasks[st.traj.prompt_index].system_prompt, memory)
            if ph.replay is not None:
                committed.add(generation_seed(commit_seed, step, st.traj.prompt_index, st.traj.sample_index, Role.ACT,
                                              st.assistant_turns), ph.replay)

    hook = on_user_turn if tts.rehearse_at == "every" else None
    # only now may a real environment exist: run_rollout calls env_factory when the episodes start
    # the committed episode is sample `attempt` of the N = 0 run: the same seeds (common random numbers)
    commits = run_rollout([commit_task(t, ph.memory) for t, ph in zip(tasks, first)], k=1, policy=committed,
                          cfg=commit_cfg, mode=Mode.ENV, env_factory=env_factory, step=step, seed=commit_seed,
                          rehearse_style=cfg.rehearse_style, enable_thinking=enable_thinking, on_user_turn=hook,
                          first_sample=attempt)
    for traj, mine in zip(commits, phases):
        traj.sample_index = attempt
        private_trajs = []
        for ph in mine:
            _link(ph, tts, attempt)
            private_trajs += ph.rehearsals
        summary = {"n": tts.n, "mode": tts.mode.value, "memory_strategy": tts.memory, "attempt": attempt,
                   "seed": seed, "rehearse_at": tts.rehearse_at,
                   "memory": next((ph.memory for ph in reversed(mine) if ph.memory), ""),
                   "phases": [ph.summary() for ph in mine]}
        traj.tts = {**summary, "private": private_trajs}
        traj.reward_breakdown["tts"] = summary
    return commits


def tts_rollout(tasks: list[Task], policy_engine: GenerationEngine, cfg: RolloutConfig, tts: TTSConfig,
                env_factory: Callable[[], Environment], seed: int, *, k: int = 1, step: int = 0,
                enable_thinking: bool = True,
                private_world: Callable[[], Environment] | None = None,
                simulator: GenerationEngine | None = None) -> list[Trajectory]:
    """k attempts per task of: `tts.n` private rehearsals, then one committed env-mode episode. Returns the
    committed trajectories ordered by (task, attempt); their private ones are in `traj.tts["private"]`.

    Seeds: attempt a's committed run samples with the seeds of sample a of the plain (N = 0) run, at every N,
    so N vs 0 is a paired comparison; its private seeds derive from `derive_seed(seed, "tts-attempt", a)`
    (recorded as its "seed"), so k attempts get k distinct seeds in both phases. Records: a committed
    trajectory's `traj.tts` = {"n", "mode", "memory_strategy", "attempt", "seed", "memory" (the last m_x),
    "phases", "private"}; a private one's = {"role": "private", "n", "mode", "attempt", "index", "user_turn",
    "assessment", "achieved", "memory", "seed"}; `reward_breakdown["tts"]` holds a JSON-safe summary."""
    if env_factory is None:
        raise ValueError("tts_rollout needs env_factory: the committed run executes in the real environment")
    if k < 1:
        raise ValueError(f"k={k}: need at least one attempt per task")
    if private_world is not None and private_world is env_factory:
        raise ValueError("private_world is the committed run's env_factory; the oracle bound needs private copies")
    commit_cfg = cfg
    if tts.commit_temperature is not None:
        commit_cfg = cfg.model_copy(update={"act": cfg.act.model_copy(update={"temperature": tts.commit_temperature})})
    if tts.n == 0:  # the plain run: k samples of one env-mode rollout
        trajs = run_rollout(tasks, k=k, policy=policy_engine, cfg=commit_cfg, mode=Mode.ENV, env_factory=env_factory,
                            step=step, seed=seed, rehearse_style=cfg.rehearse_style, enable_thinking=enable_thinking)
        for t in trajs:
            summary: dict[str, Any] = {"n": 0, "mode": tts.mode.value, "memory_strategy": tts.memory,
                                       "attempt": t.sample_index, "seed": seed, "memory": "",
                                       "rehearse_at": tts.rehearse_at, "phases": []}
            t.tts = {**summary, "private": []}
            t.reward_breakdown["tts"] = summary
        return trajs
    by_attempt = [_attempt(tasks, policy_engine, cfg, commit_cfg, tts, env_factory, a,
                           derive_seed(seed, "tts-attempt", a), step, enable_thinking, seed, private_world, simulator)
                  for a in range(k)]
    out = []
    for p in range(len(tasks)):
        counter = 0
        for a in range(k):
            traj = by_attempt[a][p]
            for priv in traj.tts["private"]:  # a unique sample index per task for the store's natural key
                priv.prompt_index, priv.sample_index = p, counter
                counter += 1
            out.append(traj)
    return out
