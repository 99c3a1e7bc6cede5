"""The batched rollout state machine: K episodes per task, Act and observations in lock-step rounds.

Each round every live episode in ACT generates in ONE `policy.generate` call; then every pending tool call
of every episode in OBSERVE is answered together: by the policy playing Rehearse (`rehearse`, EnvACE), by
the episode's own Environment (`env`, standard GRPO) or by a frozen simulator engine (`simulator`, asked with the
Rehearse prompt or, `simulator_prompt=prompted`, the prompted simulator's: envace.rollout.simulator_seat). Each
episode's handler for its phase returns the next phase (envace.rollout.state).

The rollout contract: what ends an episode is one named switch per rule (envace.config.EpisodeRules, read
from `cfg` here and from the `envace:` section by the verl agent loop; docs/rollout.md). The defaults treat
every mode alike, so rehearse and env mode differ only in who writes the observation:
- an Act output without a call answers the user turn: the next one is replayed if the turn gate allows,
  else the episode ends (FINAL_REPLY / REQUIRED_CHECK_FAILED);
- later Act prompts carry each earlier Act turn as the ids it sampled (token-in-token-out,
  envace.chat_tokens; the reference re-renders the parsed content and calls); content from tools, users
  and the model is encoded as text, so only the template writes control tokens;
- `invalid_call` (default observe): a malformed Act output becomes an error tool message and Act retries,
  or the episode ends INVALID_TOOL_CALL (`end`) — in every mode;
- `error_observation` (default continue): an observation that reports an error (`is_error_value` of the value
  Act sees: the world's `{"error": ...}` or a rehearsed `error_tool_call`, whoever wrote it) is shown to Act;
  `end` ends the episode ERROR_OBSERVATION in every mode; `end_rehearsed` is the reference's rule (a
  rehearsed error ends REHEARSE_ERROR, a real one never does);
- `rehearse_parse_failure` (default end): Rehearse output that parses to no result ends REHEARSE_ERROR
  (a real environment always answers, so this has no env counterpart), or `observe` shows the parse error;
- limits are checked before generating: MAX_TURNS, CONTEXT_LIMIT (the reference left-truncates; we stop,
  so no row sees a cut prompt) and MAX_CALLS per user turn (the Act output past it is kept, unanswered).
  The context limit applies to every prompt the episode builds: the Act prompt and, with
  `rehearse_context=every_mode` (default), each call's Rehearse prompt in every mode — env mode builds and
  measures it without generating, so both modes cut the same episodes (`rehearse_only`: the reference);
- the k calls of one Act output are rehearsed in one batch (the reference does them one at a time, each
  seeing the same history, so this is equivalent); a real environment executes them in order;
- in rehearse / simulator mode no real environment is created; an optional `shadow_env_factory` records
  `Turn.real_observation` for fidelity only, never shown to the policy;
- `echo_prompts` (env mode): each executed call's Rehearse prompt, built by the same code rehearse mode uses,
  is recorded with the real answer on `Trajectory.echo` (the echo arm's cross-entropy targets); nothing the
  episode shows or decides changes.
`prefixes` and `on_user_turn` let test-time rehearsal start from a conversation so far and react to each
replayed user message; chat-level engines get `GenRequest.messages` under the same handlers and limits.
The rollout never raises on model output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envace.config import RolloutConfig
from envace.engines.base import GenerationEngine, GenRequest, GenResult
from envace.execution_result import is_error_value
from envace.roles.act import assistant_message, is_malformed, parse_act
from envace.roles.prompts import RESULT_CLOSE, simulator_system_prompt
from envace.roles.rehearse import rehearse_messages
from envace.rollout.engine_prompts import is_chat_engine, prompt_of
from envace.rollout.seeds import generation_seed
from envace.rollout.simulator_seat import prompted_seat_messages, read_reply
from envace.rollout.state import EpisodeState, Phase
from envace.toolcall import ParsedAct
from envace.types import (
    CallRef,
    EchoPrompt,
    Environment,
    ErrorCode,
    Message,
    Mode,
    Observation,
    Role,
    Task,
    TerminationReason,
    ToolCall,
    Trajectory,
    Turn,
)
from envace.untrusted import clean_observation, clean_text, short

ACT_STOP = ["<|im_end|>"]  # Act may write several calls: stop only at the end of the turn
REHEARSE_STOP = [RESULT_CLOSE]  # nothing after the result block is ever read

TurnGate = Callable[[Trajectory, int], bool]
UserTurnHook = Callable[[list[EpisodeState]], None]


@dataclass
class _Run:
    """Rollout-wide settings shared by the handlers."""

    policy: GenerationEngine  # plays Act
    rehearser: GenerationEngine  # plays Rehearse in rehearse mode (the same engine unless per-role)
    cfg: RolloutConfig
    mode: Mode
    simulator: GenerationEngine | None
    step: int
    seed: int
    turn_gate: TurnGate | None
    rehearse_style: str
    enable_thinking: bool
    echo_prompts: bool = False
    prompted: bool = False  # simulator mode with simulator_prompt=prompted (envace.rollout.simulator_seat)

    def seed_for(self, st: EpisodeState, role: Role, index: int) -> int:
        return generation_seed(self.seed, self.step, st.traj.prompt_index, st.traj.sample_index, role, index)


def _generate(engine: GenerationEngine, requests: list[GenRequest]) -> list[GenResult]:
    if not requests:
        return []
    results = engine.generate(requests)
    if len(results) != len(requests):
        raise RuntimeError(f"{type(engine).__name__}.generate returned {len(results)} results for "
                           f"{len(requests)} requests; an engine must answer every request in order")
    for res in results:  # model text is untrusted: no lone surrogate may reach a prompt, tokenizer or record
        res.text = clean_text(res.text) if isinstance(res.text, str) else str(res.text)
    return results


def _execute(env: Environment, call: ToolCall) -> Observation:
    """Run one call in a real environment; a tool exception becomes a TOOL_ERROR observation."""
    try:
        obs = env.execute(call)
    except Exception as exc:  # the call's arguments come from the model: never crash the rollout
        return Observation(content=None, source=Role.ENV, error=ErrorCode.TOOL_ERROR,
                           detail=short(f"{call.name} raised {type(exc).__name__}: {exc}"))
    if not isinstance(obs, Observation):
        raise TypeError(f"{type(env).__name__}.execute({call.name!r}) returned {type(obs).__name__}; "
                        "an Environment must return envace.types.Observation")
    return clean_observation(obs)  # a tool may echo model text back: same sanitising as model output


def _start(task: Task, prompt_index: int, sample_index: int, mode: Mode,
           env_factory: Callable[[], Environment] | None,
           shadow_env_factory: Callable[[], Environment] | None,
           prefix: list[Message] | None = None) -> EpisodeState:
    traj = Trajectory(task=task, prompt_index=prompt_index, sample_index=sample_index, mode=mode)
    if prefix is not None:  # resume a conversation: its last message is the user turn being answered
        traj.messages.extend(prefix)
        st = EpisodeState(traj=traj, user_turn=sum(m.role == "user" for m in prefix) - 1)
    else:
        if task.system_prompt is not None:
            traj.messages.append(Message(role="system", content=task.system_prompt))
        traj.messages.append(Message(role="user", content=task.user_turns[0]))
        st = EpisodeState(traj=traj)
    if mode is Mode.ENV:
        st.env = env_factory()  # type: ignore[misc]  # checked by run_rollout
        st.env.reset(task)
    elif shadow_env_factory is not None:
        st.shadow_env = shadow_env_factory()
        st.shadow_env.reset(task)
    return st


# ----- handlers: one per phase, each returns the next phase ------------------------------------------


def handle_next_user(run: _Run, st: EpisodeState) -> Phase:
    """The current user turn got its reply: replay the next user turn, or end the episode."""
    user_turns = st.traj.task.user_turns
    if st.user_turn + 1 >= len(user_turns):
        return st.finish(TerminationReason.FINAL_REPLY)
    if run.turn_gate is not None and not run.turn_gate(st.traj, st.user_turn):
        return st.finish(TerminationReason.REQUIRED_CHECK_FAILED)
    st.user_turn += 1
    st.calls_this_turn = 0
    st.history.append(Message(role="user", content=user_turns[st.user_turn]))
    return Phase.ACT


def prepare_act(run: _Run, st: EpisodeState) -> GenRequest | None:
    """The Act request of an episode, or None after ending it on a limit."""
    if st.assistant_turns >= run.cfg.max_assistant_turns:
        st.phase = st.finish(TerminationReason.MAX_TURNS)
        return None
    sampling = run.cfg.act
    tools = st.traj.task.tools
    ids, chat, n_tokens = prompt_of(run.policy, [m.to_openai() for m in st.history], tools,
                                    enable_thinking=run.enable_thinking, sampled=[m.token_ids for m in st.history])
    if n_tokens + sampling.max_new_tokens > run.cfg.max_context_tokens:
        st.phase = st.finish(TerminationReason.CONTEXT_LIMIT)
        return None
    return GenRequest(prompt_ids=ids, temperature=sampling.temperature, top_p=sampling.top_p,
                      max_new_tokens=sampling.max_new_tokens, stop=list(ACT_STOP),
                      seed=run.seed_for(st, Role.ACT, st.assistant_turns), messages=chat,
                      tools=tools if chat is not None else None)


def handle_act(run: _Run, st: EpisodeState, req: GenRequest, res: GenResult) -> Phase:
    """Record the Act output and decide: reply → NEXT_USER, calls → OBSERVE, malformed → error."""
    st.assistant_turns += 1
    tools = st.traj.task.tools
    parsed = parse_act(res.text, tools)
    if res.meta.get("parse_error") is not None and not is_malformed(parsed):  # a chat engine's own verdict
        parsed = ParsedAct(content=res.text, error=res.meta["parse_error"], detail=str(res.meta.get("detail", "")))
    malformed = is_malformed(parsed)
    turn = Turn(role=Role.ACT, prompt_ids=list(req.prompt_ids), response_ids=list(res.token_ids),
                logprobs=list(res.logprobs), text=res.text, temperature=req.temperature,
                user_turn=st.user_turn, tool_calls=[] if malformed else list(parsed.calls),
                parse_error=parsed.error if malformed else None)
    st.traj.add_turn(turn)
    context_len = len(st.history)
    message = assistant_message(parsed, res.text)
    message.token_ids = list(res.token_ids) or None  # token-in-token-out: later prompts carry these ids
    st.history.append(message)
    if parsed.is_final_reply:
        return Phase.NEXT_USER
    if malformed:
        source = Role.ENV if run.mode is Mode.ENV else Role.REHEARSE
        st.add_observation(None, Observation(content=None, source=source, error=parsed.error,
                                             detail=parsed.detail))
        if run.cfg.invalid_call == "observe":
            return Phase.ACT
        return st.finish(TerminationReason.INVALID_TOOL_CALL)
    if st.calls_this_turn + len(parsed.calls) > run.cfg.max_calls_per_turn:
        return st.finish(TerminationReason.MAX_CALLS)
    st.calls_this_turn += len(parsed.calls)
    st.pending = list(parsed.calls)
    st.latest_act_text, st.act_context_len, st.latest_act_turn = res.text, context_len, turn.id
    return Phase.OBSERVE


def _parse_failure(obs: Observation) -> bool:
    """Rehearse (or the simulator) wrote no result at all (a real environment always answers)."""
    return obs.source is not Role.ENV and obs.content is None and obs.error is not None


def handle_observe(run: _Run, st: EpisodeState, observations: list[Observation]) -> Phase:
    """Append the answers of the pending calls, then apply the episode rules (module docstring)."""
    for call, obs in zip(st.pending, observations):
        st.add_observation(call, obs)
    st.pending = []
    if run.cfg.rehearse_parse_failure == "end" and any(_parse_failure(o) for o in observations):
        return st.finish(TerminationReason.REHEARSE_ERROR)
    if any(is_error_value(o.agent_value()) for o in observations):
        rule = run.cfg.error_observation
        if rule == "end":
            return st.finish(TerminationReason.ERROR_OBSERVATION)
        if rule == "end_rehearsed" and run.mode is not Mode.ENV:
            return st.finish(TerminationReason.REHEARSE_ERROR)
    return Phase.ACT


# ----- rounds: batch the work of every episode in one phase ------------------------------------------


def _act_round(run: _Run, states: list[EpisodeState]) -> None:
    batch = [(st, req) for st in states if (req := prepare_act(run, st)) is not None]
    results = _generate(run.policy, [req for _, req in batch])
    for (st, req), res in zip(batch, results):
        st.phase = handle_act(run, st, req, res)


def _rehearse_prompt(run: _Run, engine: GenerationEngine, st: EpisodeState,
                     call: ToolCall) -> tuple[list[int], list[dict[str, Any]] | None, bool]:
    """(prompt ids, chat messages, over the context limit) of the Rehearse prompt for one pending call."""
    msgs = (prompted_seat_messages(st.traj.task, st.history[: st.act_context_len], call, few_shot=run.cfg.few_shot)
            if run.prompted else rehearse_messages(st.traj.task, st.history[: st.act_context_len],
                                                   st.latest_act_text, call, few_shot=run.cfg.few_shot,
                                                   style=run.rehearse_style))
    ids, chat, n_tokens = prompt_of(engine, msgs, None, enable_thinking=run.enable_thinking)
    return ids, chat, n_tokens + run.cfg.rehearse.max_new_tokens > run.cfg.max_context_tokens


def _env_observe_round(run: _Run, states: list[EpisodeState]) -> None:
    for st in states:
        prompts = ([_rehearse_prompt(run, run.rehearser, st, call) for call in st.pending]
                   if run.cfg.rehearse_context == "every_mode" or run.echo_prompts else [])
        if run.cfg.rehearse_context == "every_mode" and any(over for _, _, over in prompts):
            st.phase = st.finish(TerminationReason.CONTEXT_LIMIT)  # where rehearse mode would stop
            continue
        observations = []
        for j, call in enumerate(st.pending):
            obs = _execute(st.env, call)  # type: ignore[arg-type]
            observations.append(obs)
            st.traj.env_calls += 1
            if run.echo_prompts and not prompts[j][2]:  # the Rehearse prompt this call would have had (one
                # over the context limit would have cut a rehearse-mode episode: no target), and the real answer
                st.traj.echo.append(EchoPrompt(prompt_ids=list(prompts[j][0]), call=call, observation=obs,
                                               user_turn=st.user_turn, answers=CallRef(st.latest_act_turn, j)))
        st.phase = handle_observe(run, st, observations)


def _rehearse_observe_round(run: _Run, states: list[EpisodeState]) -> None:
    engine = run.rehearser if run.mode is Mode.REHEARSE else run.simulator
    assert engine is not None  # run_rollout checks simulator mode has an engine
    sampling = run.cfg.rehearse
    jobs: list[tuple[EpisodeState, ToolCall, GenRequest, CallRef]] = []
    for st in states:
        mine: list[tuple[EpisodeState, ToolCall, GenRequest, CallRef]] = []
        for j, call in enumerate(st.pending):
            ids, chat, over = _rehearse_prompt(run, engine, st, call)
            if over:
                st.phase = st.finish(TerminationReason.CONTEXT_LIMIT)
                mine = []
                break
            seed = run.seed_for(st, Role.REHEARSE, st.rehearse_generations + j)
            mine.append((st, call, GenRequest(prompt_ids=ids, temperature=sampling.temperature,
                                              top_p=sampling.top_p, max_new_tokens=sampling.max_new_tokens,
                                              stop=list(REHEARSE_STOP), seed=seed, messages=chat),
                         CallRef(st.latest_act_turn, j)))
        jobs.extend(mine)
    results = _generate(engine, [req for _, _, req, _ in jobs])
    answers: dict[int, list[Observation]] = {}
    for (st, call, req, ref), res in zip(jobs, results):
        obs = read_reply(res.text, run.prompted)  # the one parse; stored on the turn, never redone
        turn = Turn(role=Role.REHEARSE, prompt_ids=list(req.prompt_ids), response_ids=list(res.token_ids),
                    logprobs=list(res.logprobs), text=res.text, temperature=req.temperature,
                    user_turn=st.user_turn, call=call, observation=obs,
                    parse_error=obs.error if obs.content is None else None,
                    trainable=run.mode is Mode.REHEARSE, answers=ref)
        if st.shadow_env is not None:
            turn.real_observation = _execute(st.shadow_env, call)
            st.traj.env_calls += 1
        st.traj.add_turn(turn)
        st.rehearse_generations += 1
        answers.setdefault(id(st), []).append(obs)
    for st in states:
        if st.phase is Phase.OBSERVE:
            st.phase = handle_observe(run, st, answers.get(id(st), []))


# ----- entry point ------------------------------------------------------------------------------------


def run_rollout(tasks: list[Task], *, k: int, policy: GenerationEngine | Mapping[Role, GenerationEngine],
                cfg: RolloutConfig, mode: Mode | str,
                env_factory: Callable[[], Environment] | None = None,
                simulator: GenerationEngine | None = None, step: int = 0, seed: int = 0,
                turn_gate: TurnGate | None = None,
                shadow_env_factory: Callable[[], Environment] | None = None,
                rehearse_style: str | None = None, enable_thinking: bool = True,
                prefixes: Sequence[list[Message]] | None = None,
                on_user_turn: UserTurnHook | None = None, first_sample: int = 0,
                echo_prompts: bool = False) -> list[Trajectory]:
    """Roll out K episodes per task; returns trajectories ordered by (task position, sample index).

    `mode` wins over `cfg.mode` (callers such as test-time rehearsal run one config in several modes).
    `turn_gate(traj, user_turn)` decides whether the episode may go on to the next user turn (e.g. the
    required checklist items of that turn passed); default: always.
    `policy` is one engine for both roles (shared weights), or `{Role.ACT: e1, Role.REHEARSE: e2}` for
    the per-role-policy ablation. `rehearse_style` defaults to `cfg.rehearse_style`.
    `prefixes[p]` (optional) is the conversation task p's episodes start from (ending with a user
    message); `on_user_turn(states)` sees the episodes that just received a replayed user message.
    `first_sample`: the episodes are samples first_sample .. first_sample + k - 1 of each task (their seeds
    and sample indices), so one sample of a larger group can be rerun alone with its own seeds.
    `echo_prompts` (env mode, token-level engines): record on `Trajectory.echo` each executed call's Rehearse
    prompt, built as a rehearse-mode episode builds it, with the real answer (the echo arm's targets).
    """
    if isinstance(policy, Mapping):
        missing = {Role.ACT, Role.REHEARSE} - set(policy)
        if missing:
            raise ValueError(f"per-role policy needs engines for {sorted(r.value for r in missing)}")
        act_engine, rehearse_engine = policy[Role.ACT], policy[Role.REHEARSE]
    else:
        act_engine = rehearse_engine = policy
    rehearse_style = rehearse_style or cfg.rehearse_style
    mode = Mode(mode)
    if k < 1:
        raise ValueError(f"k={k}: need at least one episode per task")
    if mode is Mode.ENV and env_factory is None:
        raise ValueError("mode=env needs env_factory (a callable returning a fresh Environment)")
    if mode is Mode.SIMULATOR and simulator is None:
        raise ValueError("mode=simulator needs simulator= (a frozen GenerationEngine playing Rehearse)")
    if echo_prompts and (mode is not Mode.ENV or is_chat_engine(rehearse_engine)):
        raise ValueError("echo_prompts records real answers under token-level Rehearse prompts: it needs mode=env "
                         "and a token-level engine")
    simulator_system_prompt(rehearse_style)  # fail fast on an unknown style
    for i, task in enumerate(tasks):
        if not task.user_turns:
            raise ValueError(f"task {i} ({task.uuid!r}) has no user message; every task needs one to start")
    if prefixes is not None:
        if len(prefixes) != len(tasks):
            raise ValueError(f"prefixes has {len(prefixes)} conversations for {len(tasks)} tasks; pass one per task")
        for i, prefix in enumerate(prefixes):
            if not prefix or prefix[-1].role != "user":
                raise ValueError(f"prefixes[{i}] must end with the user message to answer")
    run = _Run(policy=act_engine, rehearser=rehearse_engine, cfg=cfg, mode=mode, simulator=simulator, step=step,
               seed=seed, turn_gate=turn_gate, rehearse_style=rehearse_style, enable_thinking=enable_thinking,
               echo_prompts=echo_prompts, prompted=mode is Mode.SIMULATOR and cfg.simulator_prompt == "prompted")
    states = [_start(task, p, s, mode, env_factory, shadow_env_factory,
                     list(prefixes[p]) if prefixes is not None else None)
              for p, task in enumerate(tasks) for s in range(first_sample, first_sample + k)]
    while True:
        advanced = []
        for st in states:
            if st.phase is Phase.NEXT_USER:
                st.phase = handle_next_user(run, st)
                if st.phase is Phase.ACT:
                    advanced.append(st)
        if advanced and on_user_turn is not None:
            on_user_turn(advanced)
        acting = [st for st in states if st.phase is Phase.ACT]
        if not acting:
            break
        _act_round(run, acting)
        observing = [st for st in states if st.phase is Phase.OBSERVE]
        if mode is Mode.ENV:
            _env_observe_round(run, observing)
        else:
            _rehearse_observe_round(run, observing)
    return [st.traj for st in states]
