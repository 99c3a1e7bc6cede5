"""Scripted Act episodes on tool-world tasks, shared by the rollout-contract tests of both backends
(tests/rollout/test_oracle_invariant.py, tests/verl/test_rollout_parity.py).

An Act script is a pure function of the decoded Act prompt and the request's sampling settings: the position
(assistant turns so far) picks the next text of a plan, and a final reply carries a digest of the whole prompt,
so an Act output depends on every observation the episode has seen — two modes that showed Act different
observations give different Act tokens. Plans: `gold` (the reference conversation's assistant messages),
`errors` (first a call the world refuses: an unknown account / item id, then the gold ones), `malformed` (first
a broken call block, then the gold ones), `twice` (the first gold call written twice in one Act output, then
the gold ones).

`ScriptedAct` keeps a sampling engine's contract: with `slip` > 0 and a temperature above greedy, the request's
seed decides (probability `slip`) whether Act gives up, writing a final reply instead of the plan's next text —
the same seed gives the same output, different seeds may not, so the K samples of a prompt can earn different
rewards; greedy requests always follow the plan. Output past `max_new_tokens` is cut there, finish_reason
"length" (an Act output ends with `<|im_end|>`, which counts), as a real engine's would be.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Any

from envace.engines.base import GenRequest, GenResult, is_greedy
from envace.toolcall import render_tool_call
from envace.types import Task, ToolCall

PLANS = ("gold", "errors", "malformed", "twice")
MALFORMED = '<tool_call>{"name": "get_balance", "arguments": {</tool_call>'
GIVE_UP = "Sorry, I cannot finish this request."


def gold_texts(task: Task) -> list[str]:
    out = []
    for m in task.messages:
        if m.role == "assistant":
            out.append("\n".join(render_tool_call(c) for c in m.tool_calls) if m.tool_calls else m.content)
    return out


def _refused_call(task: Task) -> ToolCall:
    """The first gold call with its first string argument replaced by an id the world does not know."""
    call = next(c for m in task.messages for c in m.tool_calls)
    args = dict(call.arguments)
    key = next((k for k, v in args.items() if isinstance(v, str)), None)
    if key is not None:
        args[key] = "zz-unknown-0"
    return ToolCall(call.name, args)


def plan(task: Task, kind: str) -> list[str]:
    gold = gold_texts(task)
    if kind == "gold":
        return gold
    if kind == "errors":
        return [render_tool_call(_refused_call(task)), *gold]
    if kind == "malformed":
        return [MALFORMED, *gold]
    if kind == "twice":
        first = next(c for m in task.messages for c in m.tool_calls)
        return ["\n".join([render_tool_call(first)] * 2), *gold[1:]]
    raise ValueError(kind)


def act_text(prompt: str, texts: list[str], give_up: bool = False) -> str:
    position = prompt.count("<|im_start|>assistant\n") - 1
    text = GIVE_UP if give_up else texts[min(position, len(texts) - 1)]
    if "<tool_call>" not in text:  # a reply: it shows what Act saw
        text = f"{text} [{hashlib.sha1(prompt.encode()).hexdigest()[:8]}]"
    return text


def is_rehearse_prompt(prompt: str) -> bool:
    return "Current tool to simulate:" in prompt


def gives_up(req: GenRequest, slip: float) -> bool:
    """The seeded draw of `ScriptedAct`: True with probability `slip` at a sampling temperature, never greedy."""
    return slip > 0 and not is_greedy(req.temperature) and random.Random(req.seed).random() < slip


class ScriptedAct:
    """A token-level GenerationEngine: Act outputs from `act_text` (a seeded give-up with probability `slip`,
    module docstring); Rehearse requests go to `rehearser` (an OracleRehearser) when given. Log-probs are fixed
    per position, as a sampling engine records them."""

    chat = False

    def __init__(self, tokenizer: Any, texts: list[str] | Callable[[str], list[str]], rehearser: Any = None,
                 slip: float = 0.0) -> None:
        self.tokenizer, self.texts, self.rehearser, self.slip = tokenizer, texts, rehearser, slip
        self.eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")

    @classmethod
    def for_tasks(cls, tokenizer: Any, tasks: Sequence[Task], kind: str, rehearser: Any = None,
                  slip: float = 0.0) -> ScriptedAct:
        """One engine for several tasks: an Act prompt follows plan `kind` of the task it opens with (the task
        whose first user message is the prompt's first)."""
        plans = {task.user_turns[0]: plan(task, kind) for task in tasks}
        if len(plans) < len(tasks):
            raise ValueError("two tasks open with the same user message; the script could not tell them apart")

        def texts(prompt: str) -> list[str]:
            first = prompt.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
            return plans[first]

        return cls(tokenizer, texts, rehearser, slip)

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        out, seen = [], {}
        for req in requests:
            prompt = self.tokenizer.decode(req.prompt_ids, skip_special_tokens=False)
            if is_rehearse_prompt(prompt):
                text = self.rehearser.answer(prompt, seen)
                ids = self.tokenizer.encode(text, add_special_tokens=False)
            else:
                texts = self.texts if isinstance(self.texts, list) else self.texts(prompt)
                text = act_text(prompt, texts, gives_up(req, self.slip))
                ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.eos_id]
            finish = "stop"
            if len(ids) > req.max_new_tokens:
                ids, finish = ids[: req.max_new_tokens], "length"
                text = self.tokenizer.decode(ids, skip_special_tokens=False)
            out.append(GenResult(token_ids=ids, logprobs=[-0.01 * (i + 1) for i in range(len(ids))], text=text,
                                 finish_reason=finish))
        return out
