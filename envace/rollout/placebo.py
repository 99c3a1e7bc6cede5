"""A placebo world model: a frozen simulator that answers every tool call with the same content-free
acknowledgement, `{"status": "ok"}`.

A probe of the testbed's sensitivity, not a training arm to report as a method. Act trained against the
placebo (rollout.mode=simulator, `TrainConfig.placebo_simulator=ack`) sees a world that accepts every call and
says nothing about it; Act trained against the real world's answers (rollout.mode=env, which the oracle-rehearsal
invariant shows equal to Act trained against an oracle Rehearse) sees everything. If both gain alike, the
benchmark cannot tell a good world model from a useless one, and no world-model comparison on it means much.

It is a token-level `GenerationEngine` in the simulator seat: it reads no prompt, samples nothing and records
zero log-probs (simulator turns are never trained). Not `{}`: the rollout contract reads an empty result as a
failed rehearsal and ends the episode, which would make the placebo arm a one-call arm rather than a blind one.
Not shuffled gold values either: the acknowledgement needs no task data, so it cannot leak any answer.
"""

from __future__ import annotations

from typing import Any

from envace.engines.base import GenRequest, GenResult
from envace.execution_result import render_execution_result

PLACEBO_KINDS = ("ack",)
ACK = {"status": "ok"}


class PlaceboSimulator:
    """`GenerationEngine` answering `<execution_result>\\n{"status": "ok"}\\n</execution_result>` to every request."""

    chat = False

    def __init__(self, tokenizer: Any, kind: str = "ack") -> None:
        if kind not in PLACEBO_KINDS:
            raise ValueError(f"placebo simulator kind {kind!r} is not one of {list(PLACEBO_KINDS)}")
        self.tokenizer, self.kind = tokenizer, kind
        self.text = render_execution_result(ACK)
        self.ids = list(tokenizer.encode(self.text, add_special_tokens=False))
        self.name = f"placebo:{kind}"

    def generate(self, requests: list[GenRequest]) -> list[GenResult]:
        return [GenResult(token_ids=list(self.ids), logprobs=[0.0] * len(self.ids), text=self.text,
                          finish_reason="stop", meta={"placebo": self.kind}) for _ in requests]
