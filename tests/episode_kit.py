"""Fixtures of the episode tests (tests/rollout/ and tests/tts/ import them into their conftest.py).

- `tokenizer`: a real byte-level BPE tokenizer with the tiny model's chat template
  (envace.models.tokenizer.train_tokenizer), so every prompt is really rendered and tokenised.
- `ScriptedEngine`: a GenerationEngine *test double* that answers each request with a preset text
  (chosen by role and by the episode's position), tokenised with the real tokenizer, with fake
  log-probs. It lets every branch of the state machine be scripted exactly; the real engines (HF,
  OpenAI-compatible) are tested in tests/engines, and one test here runs a real tiny Qwen3.
- `ShopEnv`: a small real Environment (a stock table) and `ForbiddenEnv`, which fails if touched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from envace.engines.base import GenRequest, GenResult
from envace.models.tokenizer import train_tokenizer
from envace.roles.prompts import SEC_CURRENT
from envace.toolcall import tool_schema
from envace.types import ErrorCode, Message, Observation, Role, Task, ToolCall, Trajectory

TOOLS = [
    tool_schema("get_stock", {"item": {"type": "string"}}, description="Units of an item in stock."),
    tool_schema("add_stock", {"item": {"type": "string"}, "qty": {"type": "integer"}},
                description="Add units of an item."),
    tool_schema("explode", {}, description="A tool whose backend crashes."),
]


def call_text(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _corpus() -> list[str]:
    items = ["apple", "pear", "plum", "rice", "salt", "soap"]
    out = []
    for i, item in enumerate(items * 30):
        out.append(call_text("get_stock", item=item))
        out.append(f'<execution_result>\n{{"item": "{item}", "stock": {i}}}\n</execution_result>')
        out.append(f"How many {item} are left? There are {i} units of {item} in stock. Add {i} {item}.")
    return out


@pytest.fixture(scope="session")
def tokenizer():
    return train_tokenizer(_corpus(), vocab_size=400)


def make_task(uuid: str, user_turns: list[str], stock: dict[str, int] | None = None) -> Task:
    """A task whose reference conversation answers each user turn with one get_stock call."""
    stock = stock or {"apple": 5, "pear": 7}
    msgs = [Message("system", "You manage a shop.")]
    for text in user_turns:
        msgs += [Message("user", text),
                 Message("assistant", "", tool_calls=[ToolCall("get_stock", {"item": "apple"})]),
                 Message("tool", json.dumps({"item": "apple", "stock": stock["apple"]}), name="get_stock"),
                 Message("assistant", "Done.")]
    return Task(uuid=uuid, tools=TOOLS, messages=msgs, initial_state=dict(stock))


@pytest.fixture(scope="session")
def tiny_engine(tokenizer):
    """A real random tiny Qwen3ForCausalLM behind the real HF engine (output quality is irrelevant)."""
    hf = pytest.importorskip("envace.engines.hf")
    tiny = pytest.importorskip("envace.models.tiny")
    import torch

    torch.set_num_threads(1)
    cfg = tiny.TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
                               intermediate_size=64, max_position=4096, seed=0)
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model = tiny.build_model(tiny.qwen3_config(cfg, len(tokenizer), pad, [eos, pad]), seed=0)
    return hf.HFEngine(model, tokenizer, device="cpu", max_batch=16)


@pytest.fixture
def tasks() -> list[Task]:
    return [make_task("two-turns", ["How many apples?", "Add 3 apples."]),
            make_task("one-turn", ["How many pears?"], {"apple": 1, "pear": 9})]


# ----- engine test double --------------------------------------------------------------------------

_CURRENT_RE = re.compile(re.escape(SEC_CURRENT) + r"\nname: (.*)\nschema: .*\narguments: (.*)$", re.DOTALL)


def current_call(prompt: str) -> ToolCall:
    """The call a Rehearse prompt asks to simulate (read back from its last section)."""
    m = _CURRENT_RE.search(prompt.split("<|im_end|>")[-2])
    return ToolCall(m.group(1), json.loads(m.group(2)))


ActScript = list[str] | Callable[[str, int], str]
RehearseScript = str | Callable[[str, ToolCall], str] | None


class ScriptedEngine:
    """GenerationEngine test double (see module docstring). `act` is a list indexed by the episode's
    position (earlier assistant turns in the prompt; the last entry repeats) or a callable
    (prompt_text, position) -> text; `rehearse` a fixed text or a callable (prompt_text, call) -> text,
    or None when this engine must never be asked to rehearse. Stop strings and `max_new_tokens` are
    honoured like a real engine; an output that ends on its own gets the eos id appended."""

    def __init__(self, tokenizer, act: ActScript | None = None, rehearse: RehearseScript = None):
        self.tokenizer = tokenizer
        self.act, self.rehearse = act, rehearse
        self.batches: list[list[tuple[Role, GenRequest]]] = []
        self.eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def _text(self, prompt: str) -> tuple[Role, str]:
        if SEC_CURRENT in prompt:
            if self.rehearse is None:
                raise AssertionError("this engine was asked to rehearse")
            text = self.rehearse if isinstance(self.rehearse, str) else self.rehearse(prompt, current_call(prompt))
            return Role.REHEARSE, text
        if self.act is None:
            raise AssertionError("this engine was asked to act")
        position = prompt.count("<|im_start|>assistant\n") - 1
        if callable(self.act):
            return Role.ACT, self.act(prompt, position)
        return Role.ACT, self.act[min(position, len(self.act) - 1)]

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        batch, out = [], []
        for req in requests:
            role, text = self._text(self.tokenizer.decode(req.prompt_ids))
            batch.append((role, req))
            stopped = False
            for s in req.stop:
                if s in text:
                    text, stopped = text[: text.index(s) + len(s)], True
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            finish = "stop"
            if not stopped:
                ids = ids + [self.eos_id]
            if len(ids) > req.max_new_tokens:
                ids, finish = ids[: req.max_new_tokens], "length"
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
            out.append(GenResult(token_ids=ids, logprobs=[-0.01 * (1 + i % 5) for i in range(len(ids))],
                                 text=text, finish_reason=finish))
        self.batches.append(batch)
        return out

    def roles_per_batch(self) -> list[list[Role]]:
        return [[role for role, _ in batch] for batch in self.batches]


def stock_result(prompt: str, call: ToolCall) -> str:
    """A well-formed rehearsed result that echoes the call (so tests can check who answered what)."""
    return json_result({"item": call.arguments.get("item"), "stock": 42, "rehearsed": call.name})


def json_result(obj) -> str:
    return "<execution_result>\n" + json.dumps(obj, sort_keys=True) + "\n</execution_result>"


# ----- environments --------------------------------------------------------------------------------


class ShopEnv:
    """A real Environment: a stock table loaded from the task; `explode` crashes on purpose."""

    def __init__(self):
        self.stock: dict[str, int] = {}
        self.executed: list[ToolCall] = []
        self.resets = 0

    def reset(self, task: Task) -> None:
        self.stock = dict(task.initial_state or {})
        self.resets += 1

    def execute(self, call: ToolCall) -> Observation:
        self.executed.append(call)
        item = call.arguments.get("item")
        if call.name == "explode":
            raise RuntimeError("backend down")
        if item not in self.stock:
            return Observation(content=None, error=ErrorCode.TOOL_ERROR, detail=f"unknown item {item!r}")
        if call.name == "add_stock":
            self.stock[item] += call.arguments["qty"]
        return Observation(content={"item": item, "stock": self.stock[item]})

    def final_reward(self, trajectory: Trajectory) -> float:
        return 0.0


class ForbiddenEnv:
    """An Environment that fails the test if any method is called."""

    def reset(self, task):
        raise AssertionError("reset() called on a real environment")

    def execute(self, call):
        raise AssertionError("execute() called on a real environment")

    def final_reward(self, trajectory):
        raise AssertionError("final_reward() called on a real environment")


class CountingFactory:
    """An env factory that remembers every environment it made."""

    def __init__(self, cls):
        self.cls, self.made = cls, []

    def __call__(self):
        env = self.cls()
        self.made.append(env)
        return env


@pytest.fixture
def kit():
    """The helpers above, for test modules."""
    from types import SimpleNamespace

    return SimpleNamespace(ScriptedEngine=ScriptedEngine, ShopEnv=ShopEnv, ForbiddenEnv=ForbiddenEnv,
                           CountingFactory=CountingFactory, make_task=make_task, call_text=call_text,
                           json_result=json_result, stock_result=stock_result, current_call=current_call,
                           TOOLS=TOOLS)
