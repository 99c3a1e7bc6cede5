"""The behaviour metrics of `envace worldbench score`: run the enabled ones after the rows are predicted.

`behaviour_metrics` runs, per the config (docs/worldbench.md "Behaviour metrics"):
- BehR (`behr`, envace.worldbench.behr) for every row: the reference rows' predictions once, the model row's
  once per sampling seed (`seeds`; the first scoring's predictions serve `seed`, other seeds predict the
  BehR transitions again);
- the environment-token NLL (`env_nll`, envace.worldbench.env_nll) of the Act checkpoint, once;
- WM2Real (`wm2real`, envace.worldbench.wm2real): the world model is the model row (its loaded engine or
  endpoint, Rehearse prompt), else the Act checkpoint's own Rehearse role; one episode per task and seed;
- the rubric judge (`judge`, envace.worldbench.rubric) for every row, on the `seed` predictions.
One frozen copy of the Act checkpoint serves BehR, the NLL and WM2Real's Act seat. Per-transition records go
to `<out>/behaviour/<metric>[_<row>].jsonl`; the summaries to worldbench.json's `behaviour` section; the
MLflow metrics (`flat`) are `<row>/<group>/<metric>` with `_lo` / `_hi` (bootstrap) and `_seed_lo` /
`_seed_hi` (seed-level) bounds, as the dashboard's Worldbench page reads them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envace.worldbench.build import source_dirs
from envace.worldbench.config import ScoreConfig
from envace.worldbench.intervals import flat_metrics
from envace.worldbench.predict import Prediction, TrainIndex
from envace.worldbench.records import Transition, read_transitions, safe_name
from envace.worldbench.score import TransitionScore

NLL_ROW = "act_policy"


def _write(path: Path, records: Sequence[Any]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r if isinstance(r, dict) else r.to_dict(), sort_keys=True, ensure_ascii=False,
                               default=str) + "\n")
    return str(path)


def _policy(cfg: ScoreConfig) -> Any:
    from envace.config import ConfigError
    from envace.engines.slots import resolve_model_dir
    from envace.models.loading import ModelDirError, check_model_dir
    from envace.worldbench.policy_scoring import FrozenPolicy

    try:
        check_model_dir(resolve_model_dir(cfg.act_checkpoint or ""))
    except ModelDirError as exc:
        raise ConfigError(f"act_checkpoint: {exc.what}; {exc.fix}", field="act_checkpoint", what=exc.what,
                          fix=f"set act_checkpoint=<Act model dir or step_* dir>; {exc.fix}") from None
    return FrozenPolicy(cfg.act_checkpoint or "", batch_size=cfg.batch_size)


def _predict_with_seed(predictor: Any, cfg: ScoreConfig, seed: int, ts: list[Transition]) -> list[Prediction]:
    saved = predictor.cfg
    predictor.cfg = cfg.model_copy(update={"seed": seed})  # every predictor derives its request seeds from cfg.seed
    try:
        return predictor.predict(ts)
    finally:
        predictor.cfg = saved


def _behr(cfg: ScoreConfig, policy: Any, test: list[Transition], predictors: list[tuple[str, Any]],
          preds: dict[str, list[Prediction]], out: Path) -> dict[str, Any]:
    from envace.worldbench.behr import aggregate_behr, behaviour_steps, behr_scores

    every = [t for d in source_dirs(cfg.data).values() for t in read_transitions(d / "test.jsonl")]
    steps, skipped = behaviour_steps(test, every)
    where = {t.id: i for i, t in enumerate(test)}
    step_ts = [s.transition for s in steps]
    rows: dict[str, Any] = {}
    for name, predictor in predictors:
        start, rows_before = time.perf_counter(), policy.forward_rows
        model_row = name.startswith(("model:", "simulator:"))
        per_seed = []
        for s in (cfg.sample_seeds if model_row else [cfg.seed]):
            p = preds[name] if s == cfg.seed else None
            texts = [p[where[t.id]].text for t in step_ts] if p is not None else \
                [x.text for x in _predict_with_seed(predictor, cfg, s, step_ts)]
            per_seed.append(texts)
        scores, too_long = behr_scores(policy, steps, per_seed)
        rows[name] = {"aggregate": aggregate_behr(scores, cfg.behr_tolerance, cfg.bootstrap, cfg.seed),
                      "n_steps": len(scores), "skipped": {**skipped, "too_long": too_long},
                      "seeds": cfg.sample_seeds if model_row else [cfg.seed],
                      "forward_rows": policy.forward_rows - rows_before,
                      "wall_s": round(time.perf_counter() - start, 3),
                      "file": _write(out / "behaviour" / f"behr_{safe_name(name)}.jsonl", scores)}
    return rows


def _env_nll(cfg: ScoreConfig, policy: Any, test: list[Transition], index: TrainIndex, out: Path) -> dict[str, Any]:
    from envace.worldbench.env_nll import aggregate_nll, env_nll_scores

    start, rows_before = time.perf_counter(), policy.forward_rows
    scores, too_long = env_nll_scores(policy, test, cfg, index)
    return {"aggregate": aggregate_nll(scores, cfg.bootstrap, cfg.seed), "n": len(scores), "too_long": too_long,
            "split": "test", "forward_rows": policy.forward_rows - rows_before,
            "wall_s": round(time.perf_counter() - start, 3),
            "file": _write(out / "behaviour" / "env_nll.jsonl", scores)}


def _world_engine(predictors: list[tuple[str, Any]]) -> tuple[str | None, Any]:
    """(row name, generation engine) of the model row, or (None, None) when there is none."""
    from envace.rollout.chat_engine import ChatTextEngine

    for name, p in predictors:
        if name.startswith("model:"):
            if getattr(p, "chat", None) is not None:
                return name, p.chat.engine
            return name, ChatTextEngine(p.client, name=f"endpoint:{p.slot.label()}")
    return None, None


def _wm2real(cfg: ScoreConfig, policy: Any, predictors: list[tuple[str, Any]], sources: list[str],
             out: Path) -> dict[str, Any]:
    from envace.engines.factory import make_engine
    from envace.worldbench.wm2real import (
        REFUSED,
        episode_agreement,
        rehearsed_episodes,
        summarize_wm2real,
        wm2real_tasks,
    )

    start = time.perf_counter()
    name, world = _world_engine(predictors)
    act = make_engine(policy.model, policy.tokenizer)
    tasks = wm2real_tasks(cfg.wm2real_tasks)
    per_seed = []
    for s in cfg.sample_seeds:
        trajs = rehearsed_episodes(act, world, tasks, s, temperature=cfg.wm2real_temperature,
                                   max_new_tokens=cfg.max_new_tokens, rehearse_style=cfg.style,
                                   max_context_tokens=policy.context or 1024)
        per_seed.append([episode_agreement(t, s) for t in trajs])
    row = name or f"act:{policy.dir.name}"
    return {"row": row, "world_model": "model slot (simulator mode)" if name else "act checkpoint (rehearse mode)",
            "summary": summarize_wm2real(per_seed, cfg.bootstrap, cfg.seed), "seeds": cfg.sample_seeds,
            "refused": {s: REFUSED[s] for s in sources if s in REFUSED},
            "wall_s": round(time.perf_counter() - start, 3),
            "file": _write(out / "behaviour" / "wm2real.jsonl", [e for eps in per_seed for e in eps])}


def _rubric(cfg: ScoreConfig, test: list[Transition], scores: dict[str, list[TransitionScore]],
            out: Path) -> dict[str, Any]:
    from envace.worldbench.rubric import judge_rows, summarize_rubric

    assert cfg.judge is not None
    backend = cfg.judge.build_judge("judge")
    rows = {}
    for name, row_scores in scores.items():
        start = time.perf_counter()
        res = judge_rows(backend, row_scores, test, attempts=cfg.judge_attempts, temperature=cfg.judge.temperature)
        rows[name] = {**summarize_rubric(res, cfg.bootstrap, cfg.seed), "judge": cfg.judge.describe(),
                      "wall_s": round(time.perf_counter() - start, 3),
                      "file": _write(out / "behaviour" / f"rubric_{safe_name(name)}.jsonl",
                                     [{"id": r.id, "source": r.source, **v} for r, v in res.scores]
                                     + [{"id": i, "failed": k, "error": e} for i, k, e in res.failures])}
    return rows


def behaviour_metrics(cfg: ScoreConfig, test: list[Transition], index: TrainIndex,
                      predictors: list[tuple[str, Any]], preds: dict[str, list[Prediction]],
                      scores: dict[str, list[TransitionScore]], out: Path) -> dict[str, Any]:
    """The `behaviour` section of worldbench.json ({} when no behaviour metric is enabled)."""
    result: dict[str, Any] = {}
    if cfg.behr or cfg.env_nll or cfg.wm2real:
        policy = _policy(cfg)
        result.update(act_checkpoint=str(policy.dir), seeds=cfg.sample_seeds)
        if cfg.behr:
            result["behr"] = _behr(cfg, policy, test, predictors, preds, out)
        if cfg.env_nll:
            result["env_nll"] = _env_nll(cfg, policy, test, index, out)
        if cfg.wm2real:
            result["wm2real"] = _wm2real(cfg, policy, predictors, sorted({t.source.value for t in test}), out)
    if cfg.judge is not None:
        result["rubric"] = _rubric(cfg, test, scores, out)
    return result


def flat(behaviour: dict[str, Any]) -> dict[str, float]:
    """MLflow metrics of the behaviour section (see the module docstring)."""
    out: dict[str, float] = {}

    def groups(agg: dict[str, Any]) -> dict[str, Any]:
        return {"all": agg["all"], **agg.get("source", {})}

    for name, row in (behaviour.get("behr") or {}).items():
        for g, summ in groups(row["aggregate"]).items():
            for m in ("delta", "abs_delta", "within_tol"):
                out.update(flat_metrics(f"{safe_name(name)}/{g}/behr_{m}", summ[m]))
    if behaviour.get("env_nll"):
        for g, summ in groups(behaviour["env_nll"]["aggregate"]).items():
            out.update(flat_metrics(f"{NLL_ROW}/{g}/env_nll", summ["nll"]))
            if summ.get("nll_pooled") is not None:
                out[f"{NLL_ROW}/{g}/env_nll_pooled"] = float(summ["nll_pooled"])
    if behaviour.get("wm2real"):
        w = behaviour["wm2real"]
        for rate, summ in w["summary"].items():
            if isinstance(summ, dict):
                out.update(flat_metrics(f"{safe_name(w['row'])}/world/wm2real_{rate}", summ))
    for name, row in (behaviour.get("rubric") or {}).items():
        for g, dims in groups(row).items():
            for d, summ in dims.items():
                out.update(flat_metrics(f"{safe_name(name)}/{g}/rubric_{d}", summ))
        for kind, n in row["n_failed"].items():
            out[f"{safe_name(name)}/all/rubric_failed_{kind}"] = float(n)
    return out
