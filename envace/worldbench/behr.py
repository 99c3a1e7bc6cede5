"""BehR: does a predicted tool response move a frozen Act policy the way the real response does?

After Behaviour Consistency (BehR, "Beyond State Consistency: Behavior Consistency in Text-Based World
Models", arXiv 2604.13824): for a transition, a frozen reference agent (here the Act checkpoint) scores the
logged next action a' twice, after the real observation o and after the predicted one ô:

    Δ = log π(a' | h, a, o) − log π(a' | h, a, ô)          (summed over a''s tokens)

Δ = 0 when the prediction leaves the agent's next step exactly as likely as the real response did; Δ > 0
when the prediction makes the logged step less likely. Reported per transition and aggregated (all and per
source): the mean Δ, the mean |Δ| and `within_tol`, the share with |Δ| <= `tolerance` (nats), each with a
bootstrap interval over transitions and, with several sampling seeds of the predictions, a seed-level one
(envace.worldbench.intervals).

Where the logged next action comes from: transitions record the conversation BEFORE each call, so the step
after gold call p of a task is read from the task's gold transition p + 1: its history holds call p, its
real response, then the next assistant message (a final reply, in the tool world) or, when none was logged
(BFCL's turns, τ²), the next call itself after any user message. Perturbed calls have no logged next action
(the logged agent never saw their response) and the last call of a task has none recorded; both are left
out and counted (`n_skipped`). A pair longer than the checkpoint's context is left out and counted too.

Departures from the paper: the paper turns Δ into a training reward; here it is a metric only, reported
raw in nats (no clipping or normalisation), signed and absolute. Both observations are shown to the Act
role as the rollout shows any observation (`Observation.to_text`: key-sorted JSON of the value Act sees; an
unparseable prediction is the error object a rehearse-mode episode would show), so formatting differences
of the raw response text do not count and an exact prediction gives Δ = 0 exactly (its context is the real
one, scored once). The tool-world Act context starts with its domain's system prompt, as the rollout's
does; τ² and BFCL transitions carry no system prompt, so their Act contexts have none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from envace.execution_result import parse_execution_result
from envace.types import Message, Observation
from envace.worldbench.intervals import interval_summary
from envace.worldbench.policy_scoring import FrozenPolicy, act_pair
from envace.worldbench.records import CallKind, Source, Transition


@dataclass
class BehaviourStep:
    """The logged next action after one transition's call, and the conversation it was written in."""

    transition: Transition
    context: list[dict[str, Any]]  # OpenAI messages before the next action; the call's response at obs_index
    obs_index: int
    action: dict[str, Any]  # the logged next assistant message


def observation_text(predicted_text: str) -> str:
    """What the Act role sees for a Rehearse-format prediction (an error object when it does not parse)."""
    return parse_execution_result(predicted_text).to_text()


def real_observation_text(t: Transition) -> str:
    return Observation(content=t.value).to_text()


def behaviour_steps(test: Sequence[Transition], every: Sequence[Transition] | None = None
                    ) -> tuple[list[BehaviourStep], dict[str, int]]:
    """The steps of `test`'s transitions that have a logged next action, and the skip counts by reason.
    `every` (default `test`) is where the next gold transitions are looked up: the whole test split, so a
    subset of it still finds its next actions."""
    gold = {(t.source.value, t.domain, t.task_id, t.position): t for t in (every or test) if t.kind is CallKind.GOLD}
    steps: list[BehaviourStep] = []
    skipped = {"perturbed": 0, "last_call": 0, "unaligned": 0}
    for t in test:
        if t.kind is not CallKind.GOLD:
            skipped["perturbed"] += 1
            continue
        nxt = gold.get((t.source.value, t.domain, t.task_id, t.position + 1))
        if nxt is None:
            skipped["last_call"] += 1
            continue
        i = len(t.history)
        hist = nxt.history
        if len(hist) < i + 2 or hist[i].get("role") != "assistant" or hist[i + 1].get("role") != "tool":
            skipped["unaligned"] += 1
            continue
        later = next((j for j in range(i + 2, len(hist)) if hist[j].get("role") == "assistant"), None)
        if later is not None:
            context, action = hist[:later], hist[later]
        else:
            context = hist
            action = {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_next", "type": "function", "function": {"name": nxt.call["name"],
                                                                      "arguments": nxt.call["arguments"]}}]}
        steps.append(BehaviourStep(t, [dict(m) for m in context], i + 1, dict(action)))
    return steps, skipped


def _messages(step: BehaviourStep, obs_text: str) -> list[Message]:
    msgs = [Message.from_openai(m) for m in step.context]
    msgs[step.obs_index] = Message(role="tool", content=obs_text, name=msgs[step.obs_index].name)
    t = step.transition
    if t.source is Source.WORLD and (not msgs or msgs[0].role != "system"):
        from envace.worlds.registry import get_domain

        msgs.insert(0, Message(role="system", content=get_domain(t.domain).system_prompt))
    return msgs


@dataclass
class StepScore:
    id: str
    source: str
    tool: str
    n_action_tokens: int
    logp_real: float
    logp_pred: list[float]  # per seed
    delta: list[float]  # logp_real - logp_pred, per seed
    predicted_obs: list[str] = field(default_factory=list)  # per seed: what Act was shown

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def behr_scores(policy: FrozenPolicy, steps: Sequence[BehaviourStep],
                predicted: Sequence[Sequence[str]]) -> tuple[list[StepScore], int]:
    """Δ per step and seed. `predicted[s][i]` is seed s's Rehearse-format prediction for step i's transition.
    Returns the scores and the number of steps left out because a pair does not fit the context."""
    if any(len(p) != len(steps) for p in predicted):
        raise ValueError(f"predicted needs one prediction per step per seed ({len(steps)} steps), got "
                         f"{[len(p) for p in predicted]}")
    tok = policy.tokenizer
    real_text = [real_observation_text(s.transition) for s in steps]
    pred_text = [[observation_text(p[i]) for i in range(len(steps))] for p in predicted]
    # one pair per distinct (step, observation): an exact prediction reuses the real context's score
    keys: dict[tuple[int, str], int] = {}
    pairs: list[tuple[list[int], list[int]]] = []
    for i, step in enumerate(steps):
        for text in [real_text[i], *(p[i] for p in pred_text)]:
            if (i, text) not in keys:
                keys[(i, text)] = len(pairs)
                pairs.append(act_pair(tok, _messages(step, text), step.transition.tools,
                                      Message.from_openai(step.action)))
    scored = policy.score(pairs)
    out: list[StepScore] = []
    too_long = 0
    for i, step in enumerate(steps):
        real = scored[keys[(i, real_text[i])]]
        preds = [scored[keys[(i, p[i])]] for p in pred_text]
        if real is None or any(p is None for p in preds):
            too_long += 1
            continue
        lp = [p.logprob for p in preds]  # type: ignore[union-attr]
        t = step.transition
        out.append(StepScore(t.id, t.source.value, t.tool, real.n_tokens, real.logprob, lp,
                             [real.logprob - x for x in lp], [p[i] for p in pred_text]))
    return out, too_long


def summarize_behr(scores: Sequence[StepScore], tolerance: float, n_boot: int = 1000,
                   seed: int = 0) -> dict[str, Any]:
    """{"delta": ..., "abs_delta": ..., "within_tol": ...} (envace.worldbench.intervals summaries)."""
    d = np.array([s.delta for s in scores], dtype=float).reshape(len(scores), -1) if scores else np.zeros((0, 1))
    return {"delta": interval_summary(d, n_boot, seed), "abs_delta": interval_summary(np.abs(d), n_boot, seed),
            "within_tol": interval_summary((np.abs(d) <= tolerance).astype(float), n_boot, seed),
            "tolerance": tolerance}


def aggregate_behr(scores: Sequence[StepScore], tolerance: float, n_boot: int = 1000,
                   seed: int = 0) -> dict[str, Any]:
    """{"all": summary, "source": {source: summary}}."""
    by_source: dict[str, list[StepScore]] = {}
    for s in scores:
        by_source.setdefault(s.source, []).append(s)
    return {"all": summarize_behr(scores, tolerance, n_boot, seed),
            "source": {k: summarize_behr(v, tolerance, n_boot, seed) for k, v in sorted(by_source.items())}}
