"""Run one VitaBench task once: the checkout's environment, our agent / user loop, the rubric judge.

The loop follows VitaBench's Orchestrator: the agent opens with the fixed greeting (or the task's
`message_history`); the user simulator (system prompt: VitaBench's `user_system_prompt` with the
persona and instructions) and the agent (system prompt: the environment's policy, VitaBench's
`agent_system_prompt`, with the current time and weekday) alternate; an agent reply with tool calls is
executed by the environment and the agent goes on; up to 3 tries for an empty agent reply, then
INVALID_AGENT_MESSAGE; the user ends with ###STOP### / ###TRANSFER### / ###OUT-OF-SCOPE###, the agent
with ###STOP###; `max_steps` counts every message (300), `max_errors` failed tool calls (10). Too many
errors, max steps and an invalid agent message score 0 without a judge call; otherwise the judge scores
the whole conversation. Departures: the loop is ours (VitaBench's calls its own HTTP client); a user
reply with no text ends the run as USER_ERROR scoring 0 (VitaBench raises and drops the run); user
tool calls are ignored (VitaBench users have no tools); an exception anywhere in the task (environment
construction or a tool, a model call, the judge, our loop) is the run's `TaskError` with the messages so
far, scoring 0 (VitaBench retries the task 3 times, then raises and ends its run).
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass, field
from typing import Any

from envace.benchmarks.errors import StagedPolicy, StageTracker, TaskError, TaskStage
from envace.benchmarks.vita.checkout import VitaCheckout
from envace.benchmarks.vita.data import VitaTask
from envace.benchmarks.vita.scoring import RubricJudge, weekday
from envace.engines.reply import BenchPolicy
from envace.rollout.seeds import derive_seed

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
GREETING = {"english": "Hello, how can I help you?", "chinese": "你好，请问需要什么服务？"}
PREMATURE = frozenset({"too_many_errors", "max_steps", "invalid_agent_message", "user_error"})
FALLBACK_AGENT = ("# Environment\n- Current time: {time}\n\nUse the tools when the user's request needs them; ask "
                  "for missing parameters; use only information from the conversation. When the task is done and "
                  "the user needs nothing more, write '###STOP###'.")
FALLBACK_USER = ("You play a user talking to a service agent. Persona:\n<persona>\n{persona}\n</persona>\nGoal:\n"
                 "<instructions>\n{instructions}\n</instructions>\nReveal the goal a little at a time, one line per "
                 "message; never invent facts. When everything is done, reply '###STOP###'.")


@dataclass
class VitaRun:
    task_id: str
    set: str
    sample: int
    reward: float
    termination: str
    fraction: float
    n_messages: int
    n_windows: int
    seconds: float
    messages: list[dict[str, Any]] = field(default_factory=list)  # OpenAI chat dicts, agent system prompt first
    judge_messages: list[dict[str, Any]] = field(default_factory=list)  # the judge's prompt + reply, each with "window"
    seed: int = 0
    error: TaskError | None = None  # the task raised: reward 0 (errors.py)
    unparsed_windows: int = 0  # judge replies with no readable verdict (their rubrics keep their state)

    def record(self) -> dict[str, Any]:
        return {"id": self.task_id, "category": self.set, "sample": self.sample, "seed": self.seed,
                "reward": self.reward, "valid": self.error is None and self.reward == 1.0,
                "termination": self.termination, "rubric_fraction": self.fraction, "n_messages": self.n_messages,
                "n_windows": self.n_windows, "unparsed_windows": self.unparsed_windows, "seconds": self.seconds,
                "task_error": None if self.error is None else self.error.to_dict(),
                "messages": self.messages, "judge_messages": self.judge_messages}


def _flip(traj: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the user simulator sees it (roles swapped, tool traffic hidden)."""
    out = []
    for m in traj:
        if m["role"] == "user":
            out.append({"role": "assistant", "content": m.get("content") or ""})
        elif m["role"] == "assistant" and not m.get("tool_calls"):
            out.append({"role": "user", "content": m.get("content") or ""})
    return out


def run_task(checkout: VitaCheckout, task: VitaTask, agent: BenchPolicy, user: BenchPolicy, judge: RubricJudge, *,
             sample: int = 0, seed: int = 0, max_steps: int = 300, max_errors: int = 10) -> VitaRun:
    """One run of one task; never raises an `Exception` (a failure is the run's `error`, reward 0)."""
    start = time.perf_counter()
    tracker = StageTracker()
    traj: list[dict[str, Any]] = []
    try:
        return _run(checkout, task, StagedPolicy(agent, tracker), StagedPolicy(user, tracker), judge, tracker, traj,
                    sample=sample, seed=seed, max_steps=max_steps, max_errors=max_errors)
    except Exception as exc:  # noqa: BLE001 - one task's failure is recorded, the benchmark goes on
        return VitaRun(task.id, task.set, sample, 0.0, "task_error", 0.0, len(traj), 0, time.perf_counter() - start,
                       list(traj), seed=seed, error=tracker.error(exc))


def _run(checkout: VitaCheckout, task: VitaTask, agent: StagedPolicy, user: StagedPolicy, judge: RubricJudge,
         tracker: StageTracker, traj: list[dict[str, Any]], *, sample: int, seed: int, max_steps: int,
         max_errors: int) -> VitaRun:
    start = time.perf_counter()
    lang = checkout.language
    tracker.stage = TaskStage.ENVIRONMENT
    env = checkout.environment(task)
    tools = [t.openai_schema for t in env.get_tools()]
    policy = env.get_policy() if isinstance(env.get_policy(), str) else None
    tracker.stage = TaskStage.ADAPTER
    agent_sys = (policy or checkout.prompt("agent_system_prompt") or FALLBACK_AGENT).format(
        time=f"{task.time} {weekday(task.time, lang)}".strip())
    user_sys = (checkout.prompt("user_system_prompt") or FALLBACK_USER).format(persona=task.persona,
                                                                              instructions=task.instructions)
    traj += [dict(m) for m in task.message_history] or [{"role": "assistant", "content": GREETING[lang]}]
    to = "agent" if traj[-1]["role"] in ("user", "tool") else "user"
    ctx = {"benchmark": "vita", "category": task.set, "entry_id": task.id, "task_id": task.id, "sample": sample}
    steps = errors = 0
    termination: str | None = None
    while termination is None:
        if to == "user":
            r = user.reply([{"role": "system", "content": user_sys}] + _flip(traj), [],
                           seed=derive_seed(seed, "vita-user", task.id, sample, steps),
                           context={**ctx, "role": "user", "step": steps})
            text = (r.content or "").strip()
            if not text:
                termination = "user_error"
                break
            traj.append({"role": "user", "content": text})
            steps += 1
            to = "agent"
            if any(tok in text for tok in (STOP, TRANSFER, OUT_OF_SCOPE)):
                termination = "user_stop"
        else:
            for attempt in range(3):
                r = agent.reply([{"role": "system", "content": agent_sys}] + traj, tools,
                                seed=derive_seed(seed, "vita-agent", task.id, sample, steps, attempt),
                                context={**ctx, "role": "agent", "step": steps})
                if (r.content or "").strip() or r.tool_calls:
                    break
            else:
                termination = "invalid_agent_message"
                break
            msg = r.to_message()
            for j, c in enumerate(msg.get("tool_calls") or []):
                c["id"] = f"call_{steps}_{j}"
            traj.append(msg)
            steps += 1
            if STOP in (r.content or ""):
                termination = "agent_stop"
            elif r.tool_calls:
                for c, call in zip(msg["tool_calls"], r.tool_calls):
                    tracker.stage = TaskStage.ENVIRONMENT
                    with contextlib.redirect_stdout(io.StringIO()):  # VitaBench's tools print their results
                        resp = env.get_response(checkout.tool_call(call.name, dict(call.arguments), c["id"]))
                    tracker.stage = TaskStage.ADAPTER
                    errors += bool(getattr(resp, "error", False))
                    traj.append({"role": "tool", "tool_call_id": c["id"], "name": call.name,
                                 "content": str(resp.content)})
                steps += 1
            else:
                to = "user"
        if termination is None and steps >= max_steps:
            termination = "max_steps"
        if termination is None and errors >= max_errors:
            termination = "too_many_errors"
    judged: list[dict[str, Any]] = []
    unparsed = 0
    if termination in PREMATURE:
        reward, fraction, n_windows = 0.0, 0.0, 0
    else:
        tracker.stage = TaskStage.EVALUATOR
        verdict = judge.judge(task, traj)
        tracker.stage = TaskStage.ADAPTER
        reward, fraction, n_windows = verdict.reward, verdict.fraction, len(verdict.windows)
        unparsed = verdict.unparsed_windows
        judged = [{**m, "window": t["window"]} for t in verdict.transcript for m in t["messages"]]
    return VitaRun(task.id, task.set, sample, reward, termination, fraction, len(traj), n_windows,
                   time.perf_counter() - start, [{"role": "system", "content": agent_sys}, *traj], judged, seed,
                   unparsed_windows=unparsed)
