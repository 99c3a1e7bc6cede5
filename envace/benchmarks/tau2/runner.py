"""Run one τ² task once: τ²'s environment, τ²'s Orchestrator, τ²'s evaluator; our agent and user policies.

As τ²-bench's `run_task`: the domain's environment constructor, the agent given that environment's
tools and policy, the user simulator given the user tools (telecom) and `str(task.user_scenario)`,
`Orchestrator(...).run()`, then `evaluate_simulation(..., EvaluationType.ALL)`: the reward is the
product of the components in the task's `reward_basis` (DB hash match after replaying the gold actions,
env assertions, action matches, communicated info); a premature termination scores 0.
An `EmptyTurn` is recorded as τ²'s AGENT_ERROR / USER_ERROR with the trajectory so far (τ² would
raise; `run_tasks(skip_failed_samples=True)` records the same 0).
Any other exception (environment construction, a tool, a model call, τ²'s evaluator) becomes the run's
`TaskError` (errors.py): reward 0, the messages so far kept, and the benchmark goes on with the next task.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from envace.benchmarks.errors import StagedPolicy, StageTracker, TaskError, TaskStage
from envace.benchmarks.tau2.agents import EmptyTurn, adapter_classes, to_openai
from envace.benchmarks.tau2.data import Tau2Modules
from envace.engines.reply import BenchPolicy
from envace.rollout.seeds import derive_seed


@dataclass
class Tau2Run:
    domain: str
    task_id: str
    sample: int
    reward: float
    termination: str
    reward_info: dict[str, Any]
    n_messages: int
    seconds: float
    messages: list[dict[str, Any]] = field(default_factory=list)  # OpenAI chat dicts, agent system prompt first
    seed: int = 0
    error: TaskError | None = None  # the task raised: reward 0 (errors.py)

    def record(self) -> dict[str, Any]:
        return {"id": self.task_id, "category": self.domain, "sample": self.sample, "seed": self.seed,
                "reward": self.reward, "valid": self.error is None and abs(self.reward - 1.0) <= 1e-6,
                "termination": self.termination, "reward_info": self.reward_info, "n_messages": self.n_messages,
                "seconds": self.seconds, "task_error": None if self.error is None else self.error.to_dict(),
                "messages": self.messages}


def _reward_info(info: Any) -> dict[str, Any]:
    data = info.model_dump(mode="json", exclude_none=True)
    data.pop("info", None)  # verbose per-evaluator notes
    return data


def run_task(t2: Tau2Modules, domain: str, task: Any, agent_policy: BenchPolicy, user_policy: BenchPolicy, *,
             sample: int = 0, seed: int = 0, max_steps: int = 200, max_errors: int = 10) -> Tau2Run:
    """One run of one task; never raises an `Exception` (a failure is the run's `error`, reward 0)."""
    start = time.perf_counter()
    tracker = StageTracker()
    partial: dict[str, Any] = {}
    try:
        return _run(t2, domain, task, StagedPolicy(agent_policy, tracker), StagedPolicy(user_policy, tracker),
                    tracker, partial, sample=sample, seed=seed, max_steps=max_steps, max_errors=max_errors)
    except Exception as exc:  # noqa: BLE001 - one task's failure is recorded, the benchmark goes on
        return Tau2Run(domain=domain, task_id=str(getattr(task, "id", "?")), sample=sample, reward=0.0,
                       termination="task_error", reward_info={}, n_messages=len(partial.get("messages", [])),
                       seconds=time.perf_counter() - start, messages=partial.get("messages", []), seed=seed,
                       error=tracker.error(exc))


def _messages(agent: Any, messages: list[Any]) -> list[dict[str, Any]]:
    system = getattr(agent, "system_prompt", None)
    return ([{"role": "system", "content": system}] if isinstance(system, str) else []) + to_openai(messages)


def _run(t2: Tau2Modules, domain: str, task: Any, agent_policy: StagedPolicy, user_policy: StagedPolicy,
         tracker: StageTracker, partial: dict[str, Any], *, sample: int, seed: int, max_steps: int,
         max_errors: int) -> Tau2Run:
    start = time.perf_counter()
    PolicyAgent, PolicyUser = adapter_classes(t2)
    tracker.stage = TaskStage.ENVIRONMENT
    env = t2.registry.registry.get_env_constructor(domain)()
    tracker.stage = TaskStage.ADAPTER
    ctx = {"benchmark": "tau2", "domain": domain, "task_id": task.id, "entry_id": task.id, "sample": sample}
    trial_seed = derive_seed(seed, "tau2", domain, task.id, sample) % 1_000_000
    agent = PolicyAgent(tools=env.get_tools(), domain_policy=env.get_policy(), policy=agent_policy, context=ctx,
                        seed=trial_seed)
    try:
        user_tools = env.get_user_tools()
    except ValueError:  # τ²: "User tools not available" for airline / retail
        user_tools = None
    user = PolicyUser(tools=user_tools, instructions=str(task.user_scenario), policy=user_policy, context=ctx,
                      seed=trial_seed)
    orch = t2.orchestrator.Orchestrator(domain=domain, agent=agent, user=user, environment=env, task=task,
                                        max_steps=max_steps, max_errors=max_errors, seed=trial_seed, solo_mode=False)
    started = t2.orchestrator.get_now()
    tracker.stage = TaskStage.ENVIRONMENT  # the orchestrator steps the environment; model calls mark `policy`
    try:
        sim = orch.run()
    except EmptyTurn as exc:
        reason = t2.simulation.TerminationReason.AGENT_ERROR if exc.side == "agent" \
            else t2.simulation.TerminationReason.USER_ERROR
        sim = t2.simulation.SimulationRun(id=str(uuid.uuid4()), task_id=task.id, start_time=started,
                                          end_time=t2.orchestrator.get_now(), duration=time.perf_counter() - start,
                                          termination_reason=reason, messages=orch.get_trajectory(), seed=trial_seed)
    except Exception:
        try:  # keep the conversation so far with the error; never mask the original exception
            partial["messages"] = _messages(agent, orch.get_trajectory())
        except Exception:  # noqa: BLE001
            pass
        raise
    partial["messages"] = messages = _messages(agent, sim.messages)
    tracker.stage = TaskStage.EVALUATOR
    ev = t2.evaluator
    info = ev.evaluate_simulation(simulation=sim, task=task, evaluation_type=ev.EvaluationType.ALL,
                                  solo_mode=False, domain=domain)
    tracker.stage = TaskStage.ADAPTER
    term = sim.termination_reason
    return Tau2Run(domain=domain, task_id=str(task.id), sample=sample, reward=float(info.reward),
                   termination=term.value if hasattr(term, "value") else str(term), reward_info=_reward_info(info),
                   n_messages=len(sim.messages), seconds=time.perf_counter() - start, messages=messages, seed=seed)
