"""Deterministic synthetic trajectories for the store's tests and benchmark (not training data).

`synthetic_trajectory(seed, step, prompt_index, sample_index)` always returns the same trajectory for
the same arguments, so a process that re-writes a step after a crash writes identical content, and a test
can recompute what any stored row must contain. Each trajectory alternates Act tool calls and Rehearse
results over one or more user turns and ends with a final Act reply; some Rehearse turns carry the real
environment's answer (so fidelity pairs exist) and the reward breakdown holds checklist items.
"""

from __future__ import annotations

import json
import random

from envace.types import (
    CallRef,
    ChecklistItem,
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

WORDS = ("order", "refund", "flight", "hotel", "weather", "invoice", "balance", "ticket", "account",
         "delivery", "booking", "receipt", "payment", "schedule", "inventory", "warehouse")
TOOLS = ("get_order", "cancel_order", "search_flights", "book_hotel", "get_weather")
DOMAINS = ("retail", "airline", "travel")


def _tool_schema(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}}


def synthetic_task(prompt_index: int, n_user_turns: int = 2) -> Task:
    rng = random.Random(f"task-{prompt_index}")
    messages = [Message("system", "You are a helpful agent.")]
    for u in range(n_user_turns):
        messages.append(Message("user", f"user turn {u}: please check my {rng.choice(WORDS)} {rng.randint(1, 999)}"))
        messages.append(Message("assistant", "done"))
    return Task(uuid=f"task-{prompt_index:06d}", tools=[_tool_schema(t) for t in TOOLS], messages=messages,
                checklists=[[ChecklistItem(id=f"c{u}", question=f"did it handle turn {u}?")]
                            for u in range(n_user_turns)],
                domain=DOMAINS[prompt_index % len(DOMAINS)])


def synthetic_trajectory(seed: int, step: int, prompt_index: int, sample_index: int, *, n_gen: int | None = None,
                         n_user_turns: int = 2, text_words: int = 12, n_tokens: int = 16,
                         with_real: bool = True) -> Trajectory:
    """One trajectory; `n_gen` policy generations (default: random 3..9; a final reply included)."""
    rng = random.Random(f"{seed}/{step}/{prompt_index}/{sample_index}")
    task = synthetic_task(prompt_index, n_user_turns)
    n_gen = n_gen if n_gen is not None else rng.randint(3, 9)
    turns: list[Turn] = []
    n_calls = 0
    for g in range(n_gen):
        user_turn = min(n_user_turns - 1, g * n_user_turns // max(1, n_gen))
        words = " ".join(rng.choice(WORDS) for _ in range(text_words))
        ids = [rng.randrange(1000) for _ in range(n_tokens)]
        lps = [-rng.random() * 3 for _ in range(n_tokens)]
        last = g == n_gen - 1
        if last or g % 2 == 0:  # Act: a tool call, or the final reply
            calls = [] if last else [ToolCall(rng.choice(TOOLS), {"id": str(rng.randint(1, 99))})]
            n_calls += len(calls)
            body = json.dumps({"name": calls[0].name, "arguments": calls[0].arguments}) if calls else ""
            text = words if last else f"{words} <tool_call>{body}</tool_call>"
            turns.append(Turn(Role.ACT, [], ids, lps, text, 1.0, user_turn=user_turn, tool_calls=calls,
                              advantage=rng.uniform(-1, 1)))
        else:  # Rehearse the previous call
            call = turns[-1].tool_calls[0] if turns and turns[-1].tool_calls else ToolCall(TOOLS[0], {"id": "1"})
            value = {"id": call.arguments.get("id"), "status": rng.choice(["ok", "pending"]), "note": words[:20]}
            real = None
            if with_real and rng.random() < 0.5:
                real = Observation({**value, "status": rng.choice(["ok", "pending"])}, source=Role.ENV)
            text = f"<execution_result>\n{json.dumps(value)}\n</execution_result>"
            link = CallRef(len(turns) - 1, 0) if turns and turns[-1].tool_calls else None
            turns.append(Turn(Role.REHEARSE, [], ids, lps, text, 0.7, user_turn=user_turn, call=call,
                              observation=Observation(value, source=Role.REHEARSE), real_observation=real,
                              advantage=rng.uniform(-1, 1), answers=link))
    reward = None if rng.random() < 0.05 else round(rng.random(), 4)
    items = [{"user_turn": u, "item_id": f"c{u}", "weight": 1.0, "passed": rng.random() < 0.6,
              "question": f"did it handle turn {u}?"} for u in range(n_user_turns)]
    return Trajectory(task=task, prompt_index=prompt_index, sample_index=sample_index, mode=Mode.REHEARSE,
                      turns=turns, termination=rng.choice(list(TerminationReason)), reward=reward,
                      reward_breakdown={"items": items, "score": reward}, env_calls=0)


def stored_turns(traj: Trajectory) -> int:
    """How many TurnRows the writer stores for `traj` (generations + one USER row per user turn reached)."""
    n_users = len({t.user_turn for t in traj.turns if 0 <= t.user_turn < len(traj.task.user_turns)})
    return len(traj.turns) + n_users
