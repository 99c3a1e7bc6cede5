"""The prompted simulator as a worldbench model row (`model_prompt=simulator`): any chat model, told by envace's
own system prompt to be the tool, needs no Rehearse training.

The prompt, its message layout and the lenient reply parser live in envace.roles.prompted_simulator (the same
ones the act-only arm's frozen simulator and the test-time private phase use); this module fills them from a
transition: every tool schema offered, optional same-tool (arguments, response) examples from the train split
(as the Rehearse prompt's few-shot, envace.worldbench.predict.TrainIndex), the conversation so far (the last
`max_history_messages`, each cut at `max_message_chars`) and the call. The reply's JSON value (a bare scalar
becomes `{"result": value}` as real responses do, envace.worldbench.records.target_value) is handed to the
scorer re-rendered as an `<execution_result>` block, so it is scored exactly as a Rehearse prediction is. A
reply with no JSON value in it is kept as it is and scored invalid.
"""

from __future__ import annotations

from collections.abc import Sequence

from envace.execution_result import render_execution_result
from envace.roles.prompted_simulator import SYSTEM_PROMPT, parse_simulated, prompted_messages
from envace.rollout.seeds import derive_seed
from envace.worldbench.config import ScoreConfig
from envace.worldbench.predict import PROMPT_TOO_LONG, Prediction, TrainIndex
from envace.worldbench.records import Transition

SIMULATOR_SYSTEM_PROMPT = SYSTEM_PROMPT
__all__ = ["SIMULATOR_SYSTEM_PROMPT", "PromptedSimulator", "as_rehearse_text", "parse_simulated",
           "simulator_messages"]


def simulator_messages(t: Transition, cfg: ScoreConfig, train: TrainIndex) -> list[dict[str, str]]:
    """The prompted simulator's chat for one transition (module docstring)."""
    examples = ([(x.call["arguments"], x.value) for x in train.examples(t, cfg.few_shot_per_tool)]
                if cfg.few_shot else [])
    return prompted_messages(t.tools, t.history, t.call, examples, max_history=cfg.max_history_messages,
                             max_chars=cfg.max_message_chars)


def as_rehearse_text(reply: str) -> str:
    """The reply as the scorer reads predictions: its JSON value in an `<execution_result>` block, or the reply
    itself (scored invalid) when it holds no JSON value."""
    value = parse_simulated(reply)
    return reply if value is None else render_execution_result(value)


class PromptedSimulator:
    """A model slot behind SIMULATOR_SYSTEM_PROMPT: one chat request per transition."""

    def __init__(self, cfg: ScoreConfig, train: TrainIndex) -> None:
        from envace.engines.slots import SlotKind

        assert cfg.model is not None
        self.cfg, self.train, self.slot = cfg, train, cfg.model
        self.name = f"simulator:{self.slot.label()}"
        self.local = self.slot.kind is SlotKind.LOCAL
        self.backend = self.slot.build_chat_model("model") if self.local else self.slot.build_client("model")
        self.replies: list[str] = []  # the raw replies of the last predict(), before re-rendering

    def _ask(self, msgs: list[dict[str, str]], seed: int) -> tuple[str, str]:
        max_tokens = self.slot.max_tokens or self.cfg.max_new_tokens
        if not self.local:
            res = self.backend.chat(msgs, temperature=self.slot.temperature, top_p=self.slot.top_p,
                                    max_tokens=max_tokens, seed=seed)
            return res.text, ""
        from envace.engines.chat_model import ContextLengthExceeded

        try:
            choices, _ = self.backend.generate(msgs, temperature=self.slot.temperature, top_p=self.slot.top_p,
                                               max_tokens=max_tokens, seed=seed, parse_tools=False,
                                               max_model_len=self.slot.max_model_len)
        except ContextLengthExceeded:
            return "", PROMPT_TOO_LONG
        return choices[0].content, ""

    def predict(self, ts: Sequence[Transition]) -> list[Prediction]:
        out = []
        self.replies = []
        for t in ts:
            reply, note = self._ask(simulator_messages(t, self.cfg, self.train),
                                    derive_seed(self.cfg.seed, "worldbench", t.id) % (2**31))
            self.replies.append(reply)
            out.append(Prediction(as_rehearse_text(reply), note))
        return out
