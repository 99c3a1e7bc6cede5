"""The models of one evaluation, built from `EvalConfig`'s three slots (policy, user simulator, judge).

`preflight(cfg)` checks everything that does not need a model (slot dirs and API-key variables,
benchmark data paths, a judge for Vita) and raises one ConfigError naming every problem's field and fix,
so a run with a missing path fails before minutes of model loading. `bench_roles(...)` builds the chat
policies: a local policy reuses the engine `run_eval` already loaded; slots on one model dir share it.
The user simulator defaults to the policy model as its own object at temperature 0 (τ²'s default user
temperature), never the test-time-rehearsal wrapper, so no rehearsal memory reaches it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envace.config import ConfigError
from envace.engines.slots import ModelSlot, SlotCache, SlotKind
from envace.evaluation.config import EvalConfig

USES_USER_SIM = ("tau2", "vita")
USES_JUDGE = ("vita",)


def bench_names(cfg: EvalConfig) -> list[str]:
    return [b for b in cfg.benchmarks if b != "world"]


def preflight(cfg: EvalConfig) -> None:
    """Raise ConfigError listing every problem found without loading a model."""
    from envace.benchmarks.base import available_benchmarks
    from envace.benchmarks.run import Problem, requirement_problems

    others = bench_names(cfg)
    problems: list[Problem] = []
    unknown = [b for b in others if b not in available_benchmarks()]
    if unknown:  # left to run_benchmarks' own message (and the flow's per-benchmark failure)
        return
    for field, slot in used_slots(cfg, default_user=False).items():
        if slot is None:
            continue
        try:
            slot.check(field)
        except ConfigError as exc:
            problems.append(Problem(exc.field or field, exc.what or str(exc), exc.fix or "fix it"))
    problems += requirement_problems(others, cfg.paths.as_dict(), cfg.judge is not None)
    if "finmcp" in others and not any(p.field.startswith("paths.finmcp") for p in problems):
        problems += _finmcp_data_problems(cfg)
    if problems:
        # the one-line CLI error lists every field and what is wrong; the full message has each fix
        raise ConfigError("cannot run this evaluation:\n- " + "\n- ".join(map(str, problems)),
                          field=", ".join(p.field for p in problems),
                          what="; ".join(p.what for p in problems),
                          fix=problems[0].fix if len(problems) == 1 else
                          "set the fields named (each one's fix: `envace eval --help`, or --debug for the full list)")


def _finmcp_data_problems(cfg: EvalConfig) -> list[Any]:
    """The FinMCP data and schema files are read (and validated) before any model loads."""
    from envace.benchmarks.finmcp.data import FinMCPDataError, load_records, load_tool_schemas
    from envace.benchmarks.run import Problem

    out = []
    for field, path, load in (("paths.finmcp", cfg.paths.finmcp, load_records),
                              ("paths.finmcp_tools", cfg.paths.finmcp_tools, load_tool_schemas)):
        if not path:
            continue
        try:
            load(path)
        except (FinMCPDataError, UnicodeDecodeError) as exc:
            out.append(Problem(field, str(exc), f"set {field} to the FinMCP-Bench file (a JSON array of "
                                                "records, or JSON Lines; see docs/benchmarks.md)"))
    return out


def used_slots(cfg: EvalConfig, *, default_user: bool = True) -> dict[str, ModelSlot | None]:
    """{field: slot or None} of the roles the selected benchmarks use (`default_user`: the policy's slot
    stands in for an unset user simulator, as `bench_roles` builds it)."""
    others = bench_names(cfg)
    user = cfg.user_sim or (_default_user_slot(cfg.policy) if default_user and cfg.policy else None)
    return {"policy": cfg.policy if others or "world" in cfg.benchmarks else None,
            "user_sim": user if any(b in USES_USER_SIM for b in others) else None,
            "judge": cfg.judge if any(b in USES_JUDGE for b in others) else None,
            "simulator": cfg.simulator if cfg.tts.engine == "simulator" and cfg.tts.on else None}


def describe_slots(cfg: EvalConfig) -> dict[str, dict[str, Any] | None]:
    """What the results record about each role's model (never a key)."""
    assert cfg.policy is not None
    policy = cfg.policy.describe()
    user = cfg.user_sim.describe() if cfg.user_sim else {**_default_user_slot(cfg.policy).describe(),
                                                          "note": "the policy model plays the user simulator"}
    return {"policy": policy, "user_sim": user, "judge": cfg.judge.describe() if cfg.judge else None,
            **({"simulator": cfg.simulator.describe()} if cfg.simulator else {})}


def _default_user_slot(policy: ModelSlot) -> ModelSlot:
    return policy.model_copy(update={"temperature": 0.0, "top_p": 1.0})


def bench_roles(cfg: EvalConfig, device: str, engine: Any = None,
                model_dir: Path | None = None) -> tuple[Any, Any, Any]:
    """(policy, user simulator, judge backend or None) for the chat benchmarks."""
    from envace.engines.chat_model import LocalChatModel

    assert cfg.policy is not None
    cache = SlotCache(device)
    if engine is not None and model_dir is not None:
        cache.put(model_dir, LocalChatModel.guarded(engine, model_dir.name))  # the model's own context limit
    others = bench_names(cfg)
    policy = cfg.policy.build_policy("policy", cache=cache)
    user_slot = cfg.user_sim or _default_user_slot(cfg.policy)
    user_sim = user_slot.build_policy("user_sim" if cfg.user_sim else "policy", cache=cache)
    judge = (cfg.judge.build_judge("judge", cache=cache)
             if cfg.judge is not None and any(b in USES_JUDGE for b in others) else None)
    return policy, user_sim, judge


def is_local(cfg: EvalConfig) -> bool:
    return cfg.policy is not None and cfg.policy.kind is SlotKind.LOCAL
