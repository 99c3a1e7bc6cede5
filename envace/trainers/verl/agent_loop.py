"""The EnvACE agent loop for verl 0.9.1, registered as `envace_agent`.

Per prompt session (one of verl's `rollout.n` samples of a row) it rebuilds the envace Task from the
row, runs one episode of envace's own rollout state machine — Act calls (chat template + the row's
tools) alternating with Rehearse calls (envace's simulator prompt), user turns replayed from the row's
reference conversation — and returns one `AgentLoopOutput` per trainable role call, each with
`extra_fields["role"]`, the trajectory id and the turn index, and the episode reward set by the loop.

Modes (`envace.mode` in the verl config): `rehearse` (the policy writes every observation), `env` (the
tool world's WorldEnvironment executes the calls: rows must carry the world's initial state) and
`simulator` (a frozen OpenAI-compatible endpoint plays Rehearse; its calls are not rows).

Generation: the episode runs in a worker thread and reaches verl's servers through
`ServerBridgeEngine` (each request awaits `server_manager.generate` on this loop's event loop). Seeds
derive from (envace.seed, dataset index, session id) and the global step, so the K sessions of a prompt
differ and a rerun repeats them. With `envace.policy=per_role` the Act calls go to the client's own
servers and the Rehearse calls to `server_manager.rehearse` (the Rehearse actor's replicas, see
per_role.py). Returning a list of outputs needs verl's V1 trainer (`trainer.use_v1=true`), which stores
each element as its own row.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any
from uuid import uuid4

from envace.rollout import derive_seed
from envace.trainers.verl.bridge import CompletionsEngine, ServerBridgeEngine
from envace.trainers.verl.config import LoopSettings
from envace.trainers.verl.dataset import AGENT_NAME, plain, task_from_sample
from envace.trainers.verl.deps import require
from envace.trainers.verl.episode import episode_outputs, rollout_config, run_episode
from envace.types import Role

_agent_loop = require("verl.experimental.agent_loop.agent_loop")
logger = logging.getLogger(__name__)

_EXECUTORS: dict[int, ThreadPoolExecutor] = {}
_SIMULATORS: dict[tuple[str, int], CompletionsEngine] = {}
_EXECUTORS_LOCK = threading.Lock()


def _executor(threads: int) -> ThreadPoolExecutor:
    """A process-wide pool for episodes, apart from the loop's default executor (which verl's own
    helpers use): an episode holds its thread while it waits on the servers."""
    with _EXECUTORS_LOCK:
        if threads not in _EXECUTORS:
            _EXECUTORS[threads] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="envace-episode")
        return _EXECUTORS[threads]


@_agent_loop.register(AGENT_NAME)
class EnvaceAgentLoop(_agent_loop.AgentLoopBase):
    """Act + Rehearse episodes; one AgentLoopOutput per role call (see the module docstring)."""

    def __init__(self, *args: Any, tools: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.config.trainer.get("use_v1", True):
            raise ValueError("the envace_agent loop returns one output per role call, which only verl's V1 trainer "
                             "stores; set trainer.use_v1=true")
        self.settings = LoopSettings.from_verl(self.config)
        self.response_length = int(self.rollout_config.response_length)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.max_model_len = self.rollout_config.get("max_model_len")
        self.backend = str(self.rollout_config.get("name") or "vllm")
        self.full_determinism = bool(self.rollout_config.get("full_determinism", False))
        thinking = self.settings.enable_thinking
        self.enable_thinking = bool(self.apply_chat_template_kwargs.get("enable_thinking", True)
                                    if thinking is None else thinking)

    def _simulator(self) -> Any:
        """The frozen simulator's engine, one per endpoint and process (verl builds a loop per session)."""
        if self.settings.mode != "simulator":
            return None
        key = (self.settings.simulator.model_dump_json(), id(self.tokenizer))  # type: ignore[union-attr]
        with _EXECUTORS_LOCK:
            if key not in _SIMULATORS:
                _SIMULATORS[key] = CompletionsEngine(self.settings.simulator, self.tokenizer)  # type: ignore[arg-type]
            return _SIMULATORS[key]

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[Any]:
        task = task_from_sample(kwargs)
        uid = str(plain(kwargs.get("uid", uuid4().hex)))
        session = int(plain(kwargs.get("session_id", 0)))
        index = int(plain(kwargs.get("index", 0)) or 0)
        step = int(plain(kwargs.get("global_steps", 0)) or 0)
        cfg = rollout_config(self.settings, sampling_params, response_length=self.response_length,
                             prompt_length=self.prompt_length, max_model_len=self.max_model_len)
        loop = asyncio.get_running_loop()  # the worker's loop: episodes hop back onto it to generate
        engine = ServerBridgeEngine(self.server_manager, self.tokenizer, loop,
                                    request_id=f"{uid}-{session}", base_params=sampling_params,
                                    backend=self.backend, max_tokens_cap=self.response_length,
                                    unique_request_ids=self.full_determinism)
        policy: Any = engine
        if self.settings.policy == "per_role":
            rehearse = getattr(self.server_manager, "rehearse", None)
            if rehearse is None:
                raise ValueError("policy=per_role: the LLM client has no Rehearse servers; it comes from envace's "
                                 "trainer (trainer.v1.trainer_mode=envace), which builds the Rehearse actor")
            # the same session id on the Rehearse servers keeps its calls on one replica (prefix cache)
            policy = {Role.ACT: engine, Role.REHEARSE: ServerBridgeEngine(
                rehearse, self.tokenizer, loop, request_id=f"{uid}-{session}", base_params=sampling_params,
                backend=self.backend, max_tokens_cap=self.response_length,
                unique_request_ids=self.full_determinism, stats=engine.stats)}
        seed = derive_seed(self.settings.seed, index, session)
        result = await loop.run_in_executor(
            _executor(self.settings.threads),
            partial(run_episode, task, self.settings, cfg, policy, step=step, seed=seed,
                    enable_thinking=self.enable_thinking, simulator=self._simulator()))
        if engine.stats.missing_logprobs:
            logger.warning("%d of %d calls of %s came back without log-probs; set rollout.calculate_log_probs=true",
                           engine.stats.missing_logprobs, engine.stats.calls, task.uuid)
        return episode_outputs(result, trajectory_id=f"{uid}_{session}", response_length=self.response_length,
                               generation=engine.stats, empty_output_penalty=self.settings.empty_output_penalty)
