"""Run one τ² task once: τ²'s environment, τ²'s Orchestrator, τ²'s evaluator; our agent and user policies.

As τ²-bench's `run_task`: the domain's environment constructor, the agent given that environment's
tools and policy, the user simulator given the user tools (telecom) and `str(task.user_scenario)`,
`Orchestrator(...).run()`, then `evaluate_simulation(..., EvaluationType.ALL)`: the reward is the
product of the components in the task's `reward_basis` (DB hash match after replaying the gold actions,
env assertions, action matches, communicated info); a premature termination scores 0.
An `EmptyTurn` is recorded as τ²'s AGENT_ERROR / USER_ERROR with the trajectory so far (τ² would
raise; `run_tasks(skip_failed_samples=True)` records the same 0).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from envace.engines.reply import BenchPolicy
from envace.benchmarks.tau2.agents import EmptyTurn, adapter_classes
from envace.benchmarks.tau2.loader import Tau2Modules
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
    messages: list[Any] = field(default_factory=list)  # τ² Message objects (kept only when asked)

    def record(self) -> dict[str, Any]:
        return {"id": self.task_id, "category": self.domain, "sample": self.sample, "reward": self.reward,
                "valid": abs(self.reward - 1.0) <= 1e-6, "termination": self.termination,
                "reward_info": self.reward_info, "n_messages": self.n_messages, "seconds": self.seconds}


def _reward_info(info: Any) -> dict[str, Any]:
    data = info.model_dump(mode="json", exclude_none=True)
    data.pop("info", None)  # verbose per-evaluator notes
    return data


def run_task(t2: Tau2Modules, domain: str, task: Any, agent_policy: BenchPolicy, user_policy: BenchPolicy, *,
             sample: int = 0, seed: int = 0, max_steps: int = 200, max_errors: int = 10,
             keep_messages: bool = False) -> Tau2Run:
    start = time.perf_counter()
    PolicyAgent, PolicyUser = adapter_classes(t2)
    env = t2.registry.registry.get_env_constructor(domain)()
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
    try:
        sim = orch.run()
    except EmptyTurn as exc:
        reason = t2.simulation.TerminationReason.AGENT_ERROR if exc.side == "agent" \
            else t2.simulation.TerminationReason.USER_ERROR
        sim = t2.simulation.SimulationRun(id=str(uuid.uuid4()), task_id=task.id, start_time=started,
                                          end_time=t2.orchestrator.get_now(), duration=time.perf_counter() - start,
                                          termination_reason=reason, messages=orch.get_trajectory(), seed=trial_seed)
    ev = t2.evaluator
    info = ev.evaluate_simulation(simulation=sim, task=task, evaluation_type=ev.EvaluationType.ALL,
                                  solo_mode=False, domain=domain)
    term = sim.termination_reason
    return Tau2Run(domain=domain, task_id=str(task.id), sample=sample, reward=float(info.reward),
                   termination=term.value if hasattr(term, "value") else str(term), reward_info=_reward_info(info),
                   n_messages=len(sim.messages), seconds=time.perf_counter() - start,
                   messages=list(sim.messages) if keep_messages else [])
