"""Where training and evaluation tasks come from (`DataConfig`): the built-in tool world, CM2 JSON or verl
parquet. Read by `envace.data.tasks.load_tasks`; embedded in the SFT, train and eval configs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from envace.config import BaseConfig, ConfigError


class DataConfig(BaseConfig):
    source: Literal["world", "cm2", "parquet"] = Field(
        "world", description="Task source: built-in tool world, CM2 JSON, verl parquet.")
    path: str | None = Field(None, description="Data file for source=cm2|parquet.")
    domains: list[str] | None = Field(None, description="Tool-world domains (None = all).")
    split: str = Field("train", description="Tool-world split to train on.")
    n_tasks: int = Field(4000, ge=1, description="Tool-world tasks generated for training.")
    seed: int = Field(0, description="Task-generation seed.")

    @model_validator(mode="after")
    def _path_needed(self) -> DataConfig:
        if self.source != "world" and not self.path:
            raise ConfigError(f"data.path is empty but data.source={self.source!r} needs a file; set data.path=FILE")
        return self
