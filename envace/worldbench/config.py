"""Configs of `envace worldbench build` and `envace worldbench score` (validated at construction)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from envace.config import BaseConfig
from envace.engines.slots import ModelSlot
from envace.tracking.config import TrackingConfig
from envace.worldbench.records import Source


class BuildConfig(BaseConfig):
    out: str = Field("data/worldbench", description="Output dir: <source>/{train,test}.jsonl + manifest.json.")
    sources: list[Source] = Field(default_factory=lambda: [Source.TAU2, Source.BFCL, Source.WORLD],
                                  description="Sources to record (vita needs vita_checkout).")
    seed: int = Field(0, description="Seed of the perturbation choices and of the BFCL / VitaBench splits.")
    perturbed: bool = Field(True, description="Add perturbed calls (wrong id, out of range, missing argument).")
    tau2_domains: list[str] = Field(default_factory=lambda: ["airline", "retail", "telecom"],
                                    description="τ² domains (their split_tasks.json train / test).")
    tau2_limit: int | None = Field(None, ge=1, description="First N tasks of each τ² domain and split.")
    bfcl_categories: list[str] = Field(default_factory=lambda: ["multi_turn_base"],
                                       description="BFCL multi-turn categories.")
    bfcl_limit: int | None = Field(None, ge=1, description="First N entries of each BFCL category.")
    test_fraction: float = Field(0.3, gt=0.0, lt=1.0,
                                 description="BFCL / VitaBench: share of tasks (seeded by id) in the test set.")
    vita_checkout: str | None = Field(None, description="Root of a meituan-longcat/vitabench clone.")
    vita_calls: str | None = Field(None, description="VitaBench results JSON whose calls are replayed "
                                   "(default: the tasks' own message_history).")
    vita_sets: list[str] = Field(default_factory=lambda: ["delivery", "instore", "ota"], description="VitaBench sets.")
    vita_language: str = Field("en", description="VitaBench task language: en | zh.")
    benchmark_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Extra replay_tasks options per benchmark source, by name (a benchmark "
        "added later gets only these; docs/extending.md).")
    world_train: int = Field(60, ge=1, description="Built-in world train tasks.")
    world_test: int = Field(60, ge=1, description="Built-in world test tasks.")
    dvc_repo: str | None = Field(None, description="Also `dvc add` (and push) the output dir in this DVC repository "
                                 "root, after reading every file back (None: leave it to dvc.yaml's stage).")

    @model_validator(mode="after")
    def _vita(self) -> BuildConfig:
        if Source.VITA in self.sources and not self.vita_checkout:
            raise ValueError("sources holds vita but vita_checkout is not set; set vita_checkout=<vitabench clone> "
                             "or drop vita from sources")
        return self


REFERENCE_ROWS = ("copy_last", "typed_empty")


class ScoreConfig(BaseConfig):
    data: str = Field("data/worldbench", description="A `worldbench build` output dir.")
    out: str = Field("runs/worldbench", description="Output dir of worldbench.json.")
    model: ModelSlot | None = Field(None, description="The model slot to score (model.model_dir=DIR, or "
                                    "model.base_url=URL model.model=NAME); None: reference rows only.")
    reference_rows: list[str] = Field(default_factory=lambda: list(REFERENCE_ROWS),
                                      description="Reference predictors scored beside the model.")
    sources: list[Source] | None = Field(None, description="Sources to score (None: every source in data).")
    limit: int | None = Field(None, ge=1, description="Score a seeded subset of N test transitions per source.")
    seed: int = Field(0, description="Seed of the subset, the bootstrap and generation.")
    style: Literal["history", "compact", "full"] = Field("history", description="Rehearse prompt style.")
    few_shot: bool = Field(True, description="Show same-tool (call, response) examples from the train split.")
    few_shot_per_tool: int = Field(2, ge=0, description="Train examples per tool in the few-shot section.")
    max_history_messages: int = Field(12, ge=0, description="Most recent conversation messages kept in the prompt.")
    max_message_chars: int = Field(600, ge=50, description="Longer messages are cut (with '…') in the prompt.")
    max_prompt_tokens: int | None = Field(None, ge=16, description="Local models: drop the oldest history until "
                                          "the prompt fits (None: the model's context minus max_new_tokens).")
    max_new_tokens: int = Field(256, ge=1, description="Most tokens per predicted response.")
    batch_size: int = Field(8, ge=1, description="Local models: prompts per generation batch.")
    bootstrap: int = Field(1000, ge=0, description="Bootstrap resamples per interval (0: no intervals).")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig,
                                     description="MLflow and store (tracking.store_url; None: <out>/store.db).")
    model_prompt: Literal["rehearse", "simulator"] = Field(
        "rehearse", description="How the model slot is asked: the Rehearse prompt, or `simulator`: envace's "
        "prompted-simulator system prompt for any chat model (envace.worldbench.simulator).")
    # behaviour metrics (docs/worldbench.md "Behaviour metrics")
    act_checkpoint: str | None = Field(None, description="Frozen Act checkpoint (model dir or step_* dir) that "
                                       "behr, env_nll and wm2real read.")
    behr: bool = Field(False, description="BehR: change of the Act checkpoint's log-likelihood of the logged next "
                       "action, real vs predicted response (needs act_checkpoint).")
    behr_tolerance: float = Field(0.1, gt=0.0, description="BehR: |Δ| in nats counted as unchanged (within_tol).")
    env_nll: bool = Field(False, description="Per-token NLL of the real responses under the Act checkpoint's "
                          "Rehearse prompt (needs act_checkpoint).")
    wm2real: bool = Field(False, description="WM2Real: rehearsed tool-world episodes replayed in the real world "
                          "(needs act_checkpoint; the world model is the model slot, else the checkpoint's own "
                          "Rehearse role).")
    wm2real_tasks: int = Field(20, ge=1, description="WM2Real: held-out tool-world test tasks, one episode each "
                               "per seed.")
    wm2real_temperature: float = Field(0.0, ge=0.0, le=10.0, description="WM2Real: Act and world-model sampling "
                                       "temperature (0: greedy; seeds then replay the same episodes).")
    judge: ModelSlot | None = Field(None, description="Rubric judge slot (judge.base_url=URL judge.model=NAME, or "
                                    "judge.model_dir=DIR); None: no rubric scores.")
    judge_attempts: int = Field(3, ge=1, description="Rubric judge: attempts per transition (backoff between).")
    seeds: list[int] | None = Field(None, description="Sampling seeds of BehR's model-row predictions and of the "
                                    "WM2Real episodes (None: [seed]); two or more add seed-level intervals.")

    @model_validator(mode="after")
    def _rows(self) -> ScoreConfig:
        bad = [r for r in self.reference_rows if r not in REFERENCE_ROWS]
        if bad:
            raise ValueError(f"reference_rows {bad} unknown; use names from {list(REFERENCE_ROWS)}")
        if self.model is None and not self.reference_rows:
            raise ValueError("nothing to score: set model.model_dir=<dir> (or model.base_url=...) or reference_rows")
        needs = [name for name in ("behr", "env_nll", "wm2real") if getattr(self, name)]
        if needs and not self.act_checkpoint:
            raise ValueError(f"{', '.join(f'{n}=true' for n in needs)} needs act_checkpoint=<Act model dir or "
                             "step_* checkpoint dir>; set it or turn those metrics off")
        if self.model_prompt == "simulator" and self.model is None:
            raise ValueError("model_prompt=simulator needs a model slot: model.base_url=URL model.model=NAME "
                             "(or model.model_dir=DIR)")
        if self.wm2real and self.model_prompt == "simulator":
            raise ValueError("wm2real plays rollout episodes, whose world model answers the Rehearse prompt; the "
                             "prompted simulator is a worldbench row only: set model_prompt=rehearse or wm2real=false")
        if self.seeds is not None and (not self.seeds or len(set(self.seeds)) != len(self.seeds)):
            raise ValueError(f"seeds {self.seeds} must be distinct and non-empty (or null for [seed])")
        return self

    @property
    def sample_seeds(self) -> list[int]:
        return list(self.seeds) if self.seeds else [self.seed]
