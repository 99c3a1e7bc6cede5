"""The echo arm: real-environment GRPO plus cross-entropy on the real observations as Rehearse targets.

An env-mode run (`rollout.mode=env`) executes every call in the real world; the Rehearse role generates
nothing and has no GRPO rows. With `algo.echo_coef` > 0 the rollout records, for each executed call, the
Rehearse prompt a rehearse-mode episode would have built for it at that point (`run_rollout(echo_prompts=
True)`: the same `rehearse_messages` / chat-template code, the same history, latest Act output, call,
few-shot and style; `Trajectory.echo`), and the real answer. Each becomes one echo row: prompt = that
Rehearse prompt, target = the real answer rendered as a Rehearse result, exactly the SFT's Rehearse target
form (`render_execution_result(agent_value) + "<|im_end|>"`, envace.trainers.sft). The update adds
`echo_coef` x the token-mean NLL of the echo rows (their own tokens only, temperature 1) to the GRPO loss
(envace.trainers.update, as an `ExtraRows` set named `echo`); the GRPO rows, their rewards, advantages and loss
are those of plain GRPO. Logged per step: `echo/nll`, `echo/tokens`, `echo/rows`. As an arm (`EchoArm`, switched
on by `algo.echo_coef` > 0): `before_rollout` asks the rollout for the Rehearse prompts, `extra_rows` adds the
echo set, `metrics` logs it.

Which model learns: the shared policy; with `policy=per_role`, the Rehearse model (it gets only echo rows,
since env mode has no Rehearse GRPO rows). A call whose Rehearse prompt would not fit `max_context_tokens`
with the Rehearse budget gets no echo row (a rehearse-mode episode would have stopped there).

Departure: the ECHO-style objective in the literature trains a world model on real transitions; here it is a
side loss on the policy's own on-policy transitions, one row per executed call of the trained trajectories.
"""

from __future__ import annotations

from typing import Any

from envace.chat_tokens import encode_target
from envace.execution_result import render_execution_result
from envace.trainers.arms.base import Arm, StepContext
from envace.trainers.sft_samples import END
from envace.trainers.train_rows import ExtraRows, TrainRow
from envace.types import Observation, Role, Trajectory

NAME = "echo"  # the update's row-set name: its metrics are echo_nll, echo_tokens, echo_rows


def rehearse_target_text(obs: Observation) -> str:
    """The text Rehearse would have to write to answer exactly as the real environment did (without the
    end-of-turn marker)."""
    return render_execution_result(obs.agent_value())


def echo_rows(trajectories: list[Trajectory], tokenizer: Any) -> list[TrainRow]:
    """One supervised Rehearse row per recorded real call (`Trajectory.echo`), in trajectory order."""
    rows: list[TrainRow] = []
    for key, traj in enumerate(trajectories):
        for e in traj.echo:
            target = encode_target(tokenizer, rehearse_target_text(e.observation) + END)
            rows.append(TrainRow.standalone(role=Role.REHEARSE, prompt_ids=list(e.prompt_ids), response_ids=target,
                                            old_logprobs=[0.0] * len(target), temperature=1.0,
                                            prompt_index=traj.prompt_index, trajectory_key=key, reward=0.0))
    return rows


def echo_metrics(updates: dict[str, Any]) -> dict[str, float]:
    """`echo/nll` (token-mean over the step's echo tokens, first epoch), `echo/tokens`, `echo/rows`."""
    m: dict[str, float] = {}
    for upd in updates.values():
        um = getattr(upd, "metrics", {})
        if f"{NAME}_nll" in um:
            m["echo/nll"], m["echo/tokens"], m["echo/rows"] = (um[f"{NAME}_nll"], um[f"{NAME}_tokens"],
                                                               um[f"{NAME}_rows"])
    return m


class EchoArm(Arm):
    """`algo.echo_coef` > 0 (rollout.mode=env, checked by TrainConfig)."""

    @classmethod
    def switched_on(cls, cfg) -> bool:
        return cfg.algo.echo_coef > 0

    def before_rollout(self, ctx: StepContext) -> dict[str, Any]:
        return {"echo_prompts": True}

    def extra_rows(self, ctx: StepContext) -> list[ExtraRows]:
        return [ExtraRows(NAME, echo_rows(ctx.trajectories, ctx.tokenizer), self.cfg.algo.echo_coef, Role.REHEARSE)]

    def metrics(self, ctx: StepContext, updates: dict[str, Any]) -> dict[str, float]:
        return echo_metrics(updates)
