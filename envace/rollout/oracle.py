"""An oracle Rehearse engine: it writes exactly the real environment's response to every rehearsed call.

With it in the Rehearse seat, a rehearse-mode episode sees the same observations as an env-mode episode
with the same seeds, so the two modes must give the same Act tokens, rewards and Act-row advantages: the
invariant that says the arms differ only in who writes the observation (tests/rollout/test_oracle_invariant.py
on the embedded trainer, tests/verl/test_rollout_parity.py on the verl agent loop). A diagnostic and test
instrument, not a training arm: it reads the real world, which no rehearsal may do.

It is a token-level `GenerationEngine` that sees only what any Rehearse engine sees, the prompt: it decodes
it and reads the `full` style's sections (the transcript h_t, the latest Act output and the call to
simulate; `history` and `compact` prompts lack the latest Act output, which the world state after the
earlier calls of the same output depends on, so they are refused). The task is the one whose first user
message opens the transcript; the world state is rebuilt by replaying, on a fresh environment, every call
the oracle itself answered earlier in the episode (found as the longest earlier transcript that prefixes
this one), then the earlier calls of the latest Act output, then this call. Identical calls within one Act
output are told apart by their order among the requests of one `generate` batch (the embedded rollout
sends an episode's calls in order in one batch; a server that receives them concurrently must not see
duplicates). Assumes the model's text holds no section header of the Rehearse prompt.

Sampling settings: the world answers one way, so seed and temperature change nothing (every request is
answered as a greedy one would be); `max_new_tokens` is kept as by any engine — a longer answer is cut there
(finish_reason "length", and the cut result then fails to parse), so give the Rehearse seat room for the world's
answers when comparing with env mode.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from envace.engines.base import GenRequest, GenResult
from envace.execution_result import render_execution_result
from envace.roles.act import assistant_message, parse_act
from envace.roles.prompts import SEC_CURRENT, SEC_HISTORY, SEC_LATEST
from envace.roles.rehearse import transcript
from envace.rollout.machine import _execute
from envace.types import Environment, Task, ToolCall

_USER_OPEN, _TURN_CLOSE = "<|im_start|>user\n", "<|im_end|>"


def _sections(prompt: str) -> tuple[str, str, ToolCall]:
    """(transcript, latest Act output, call) of a decoded `full`-style Rehearse prompt."""
    start = prompt.rfind(_USER_OPEN)
    body = prompt[start + len(_USER_OPEN):] if start >= 0 else prompt
    end = body.rfind(_TURN_CLOSE)
    body = body[:end] if end >= 0 else body
    h, lat, cur = (body.find(f"{SEC_HISTORY}\n"), body.rfind(f"\n\n{SEC_LATEST}\n"),
                   body.rfind(f"\n\n{SEC_CURRENT}\n"))
    if min(h, lat, cur) < 0 or not h < lat < cur:
        raise ValueError("the oracle Rehearse engine needs rehearse_style=full prompts (transcript, latest Act "
                         "output and call); set rollout.rehearse_style=full")
    history = body[h + len(SEC_HISTORY) + 1: lat]
    latest = body[lat + len(SEC_LATEST) + 3: cur]
    current = body[cur + len(SEC_CURRENT) + 3:]
    name = current.split("name: ", 1)[1].split("\n", 1)[0]
    arguments = json.loads(current.rsplit("\narguments: ", 1)[1].strip())
    return history, latest, ToolCall(name, arguments)


class OracleRehearser:
    """`GenerationEngine` playing Rehearse with the real environment's answers (module docstring).

    `tasks`: the tasks being rolled out (identified by their first user message); `env_factory`: a fresh
    real environment; `tokenizer`: the policy's (its prompts are decoded, its answers encoded)."""

    chat = False

    def __init__(self, tokenizer: Any, tasks: Sequence[Task], env_factory: Callable[[], Environment]) -> None:
        self.tokenizer, self.tasks, self.env_factory = tokenizer, list(tasks), env_factory
        self._answered: dict[str, list[ToolCall]] = {}  # transcript after an Act output -> calls executed so far
        self._lock = threading.Lock()
        self.eos_id = tokenizer.convert_tokens_to_ids(_TURN_CLOSE)

    def _task(self, history: str) -> Task:
        """The task whose user turns open the transcript's user lines (ties: the same initial world state)."""
        users = [line[len("User: "):] for line in history.split("\n") if line.startswith("User: ")]
        found = [t for t in self.tasks if t.user_turns and users and t.user_turns[0].startswith(users[0])
                 and all(any(said.startswith(u) for said in t.user_turns) for u in users)]
        states = {json.dumps(t.initial_state, sort_keys=True, default=str) for t in found}
        if not found or len(states) > 1:
            raise ValueError(f"oracle Rehearse engine: {len(found)} of its {len(self.tasks)} tasks, with "
                             f"{len(states)} different initial states, open with this transcript's user message; "
                             "pass the rolled-out tasks, each with its own opening")
        return found[0]

    def _earlier(self, history: str) -> list[ToolCall]:
        best = ""
        for key in self._answered:
            if len(key) > len(best) and (history == key or history.startswith(key + "\n")):
                best = key
        return list(self._answered.get(best, []))

    def answer(self, prompt: str, seen: dict[tuple[str, str, str], int]) -> str:
        history, latest, call = _sections(prompt)
        task = self._task(history)
        parsed = parse_act(latest, task.tools)
        same = [i for i, c in enumerate(parsed.calls) if c.name == call.name and c.arguments == call.arguments]
        if not same:
            raise ValueError(f"oracle Rehearse engine: call {call.name} is not among the latest Act output's calls")
        dup_key = (history, latest, json.dumps([call.name, call.arguments], sort_keys=True))
        j = same[seen.get(dup_key, 0) % len(same)]
        seen[dup_key] = seen.get(dup_key, 0) + 1
        with self._lock:
            done = self._earlier(history)
            if j == len(parsed.calls) - 1:
                after = f"{history}\n{transcript([assistant_message(parsed, latest)])}"
                self._answered[after] = done + list(parsed.calls)
        env = self.env_factory()
        env.reset(task)
        for c in done + list(parsed.calls[:j]):
            _execute(env, c)
        return render_execution_result(_execute(env, parsed.calls[j]).agent_value())

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        seen: dict[tuple[str, str, str], int] = {}
        out = []
        for req in requests:
            text = self.answer(self.tokenizer.decode(req.prompt_ids, skip_special_tokens=False), seen)
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            finish = "stop"
            if len(ids) > req.max_new_tokens:
                ids, finish = ids[: req.max_new_tokens], "length"
                text = self.tokenizer.decode(ids, skip_special_tokens=False)
            out.append(GenResult(token_ids=ids, logprobs=[0.0] * len(ids), text=text, finish_reason=finish))
        return out
