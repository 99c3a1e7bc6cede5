"""Held-out environment-token NLL: how surprised is the policy by what real environments answered?

For each test transition (a split no checkpoint trained on: the built-in world's test tasks hold (shape,
entity) pairs no training task holds; τ², BFCL and VitaBench responses were never trained on), the frozen
policy reads the real response in the format its Rehearse role was trained to write it: the Rehearse chat
of the configured style (envace.worldbench.predict.prompt_messages, the scoring prompt, with the same
history / few-shot cuts to fit the context), then `<execution_result>` + the response's target value +
the end-of-turn token, as SFT's Rehearse targets are (envace.trainers.sft_samples.rehearse_samples). The NLL is
minus the log-probability of those target tokens.

Reported: the mean over transitions of each transition's per-token NLL (`nll`, with a bootstrap interval
over transitions: every transition weighs the same however long its response) and the token-pooled
per-token NLL (`nll_pooled`: total NLL over total tokens, no interval), all and per source; lower is better.
Perturbed calls are included: their error responses are environment tokens too. The prompt is rendered with
`enable_thinking` on, as the rollout and SFT render Rehearse prompts (the generating predictor turns it
off; chat templates that ignore the flag render both alike).

Departure: a language-modelling metric of the world-model role, not of an agent's behaviour; it needs no
generation, so it is the cheapest behaviour-adjacent number here (one forward row per transition).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from envace.chat_tokens import encode_target
from envace.execution_result import render_execution_result
from envace.worldbench.config import ScoreConfig
from envace.worldbench.intervals import interval_summary
from envace.worldbench.policy_scoring import END, FrozenPolicy
from envace.worldbench.predict import TrainIndex, fit_rehearse_ids
from envace.worldbench.records import Transition


@dataclass
class NLLScore:
    id: str
    source: str
    kind: str
    n_tokens: int
    nll_sum: float

    @property
    def nll(self) -> float:
        return self.nll_sum / self.n_tokens

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "nll": self.nll}


def env_nll_scores(policy: FrozenPolicy, test: Sequence[Transition], cfg: ScoreConfig,
                   train: TrainIndex) -> tuple[list[NLLScore], int]:
    """Per-transition NLL of the real response; also the number left out (no prompt fits the context)."""
    tok = policy.tokenizer
    pairs: list[tuple[list[int], list[int]]] = []
    for t in test:
        target = encode_target(tok, render_execution_result(t.value) + END)
        limit = None if policy.context is None else policy.context - len(target)
        ids = fit_rehearse_ids(t, cfg, train, tok, limit, enable_thinking=True) if limit is None or limit > 0 else None
        pairs.append((ids or [], target))
    scored = policy.score(pairs)
    out = [NLLScore(t.id, t.source.value, t.kind.value, s.n_tokens, -s.logprob)
           for t, s in zip(test, scored) if s is not None]
    return out, len(test) - len(out)


def summarize_nll(scores: Sequence[NLLScore], n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    tokens = sum(s.n_tokens for s in scores)
    return {"nll": interval_summary(np.array([s.nll for s in scores]), n_boot, seed),
            "nll_pooled": sum(s.nll_sum for s in scores) / tokens if tokens else None, "tokens": tokens}


def aggregate_nll(scores: Sequence[NLLScore], n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    by_source: dict[str, list[NLLScore]] = {}
    for s in scores:
        by_source.setdefault(s.source, []).append(s)
    return {"all": summarize_nll(scores, n_boot, seed),
            "source": {k: summarize_nll(v, n_boot, seed) for k, v in sorted(by_source.items())}}
