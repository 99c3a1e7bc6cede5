"""`envace eval` config."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from envace.config import BaseConfig, RolloutConfig, SamplingConfig
from envace.rollout.tts_private import TTSConfig
from envace.tracking.config import TrackingConfig
from envace.data.config import DataConfig


def _eval_rollout() -> RolloutConfig:
    return RolloutConfig(mode="env", act=SamplingConfig(temperature=0.0, max_new_tokens=64),
                         rehearse=SamplingConfig(temperature=0.0, max_new_tokens=48))


class EvalConfig(BaseConfig):
    model: str = Field(..., description="Model dir or a step_* checkpoint dir (its policy/ or act/ model is used).")
    benchmarks: list[str] = Field(default_factory=lambda: ["world"], description="world, bfcl, tau2, vita, finmcp.")
    split: str = Field("test", description="Tool-world split.")
    n_tasks: int = Field(100, ge=1, description="Tool-world tasks.")
    k: int = Field(1, ge=1, description="Samples per task (Avg@k).")
    seeds: list[int] = Field(default_factory=lambda: [0], description="Evaluation seeds (sampling).")
    data: DataConfig = Field(default_factory=lambda: DataConfig(split="test"), description="Task source.")
    rollout: RolloutConfig = Field(default_factory=_eval_rollout, description="Sampling and limits (mode is set per measurement).")
    fidelity: bool = Field(True, description="Also run a rehearse-mode pass and compare rehearsed vs real responses.")
    tts_n: int = Field(0, ge=0, le=8, description="Private rehearsals before the committed execution (0 = none).")
    tts_mode: Literal["parallel", "sequential"] = Field("parallel", description="TTS mode.")
    tts: TTSConfig = Field(default_factory=TTSConfig, description="Test-time rehearsal settings (temperatures, "
                           "rehearse_at first | every user message, memory cap).")
    user_sim_model: str | None = Field(None, description="Model dir of the τ² user simulator (its own engine); "
                                       "None: the un-wrapped policy model, never the TTS policy.")
    bench_limit: int | None = Field(None, ge=1, description="Entries per benchmark category (quick runs).")
    out_dir: str | None = Field(None, description="Where to write eval tables (None: beside the model).")
    device: str | None = Field(None, description="cpu | cuda | None (auto).")
    threads: int | None = Field(None, ge=1, description="torch CPU threads.")
    tracking: TrackingConfig = Field(default_factory=lambda: TrackingConfig(enabled=False), description="MLflow + store.")
