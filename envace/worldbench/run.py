"""`envace worldbench score`: predict and score a build's test transitions; write the report.

Per source: the test transitions (or a seeded subset of `limit` of them: ordered by a hash of (seed, id),
the first `limit` taken, so the same subset comes back every time), the train transitions for few-shot
and the reference rows' fallbacks. An empty test split is an error naming its file, not a score over
nothing. Each row (the reference rows, then the model slot) predicts every
selected transition; its scores are aggregated (envace.worldbench.score) with its wall time.

Outputs: `<out>/worldbench.json` (config, data hashes, per-row aggregates, wall times, failures),
`<out>/scores/<row>.jsonl` (every transition's prediction and scores), one MLflow run (params = the
config; metrics `<row>/<source>/<metric>`, `<row>/all/<metric>`, `<row>/wall_s`; the JSON as an
artifact) and the store (envace.store.worldbench_rows: a run per row, a row per transition). The behaviour
metrics enabled in the config (BehR, environment-token NLL, WM2Real, rubric judge) run after the rows
(envace.worldbench.behaviour) and add a `behaviour` section and their own MLflow metrics. A model slot is
asked through the Rehearse prompt, or with `model_prompt=simulator` through envace's prompted-simulator
prompt (envace.worldbench.simulator).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from envace.worldbench.behaviour import behaviour_metrics
from envace.worldbench.behaviour import flat as behaviour_flat
from envace.worldbench.build import source_dirs
from envace.worldbench.config import ScoreConfig
from envace.worldbench.predict import PROMPT_TOO_LONG, CopyLast, TrainIndex, TypedEmpty, model_predictor, timed_predict
from envace.worldbench.records import Transition, read_transitions, safe_name
from envace.worldbench.score import MEANS, RATES, aggregate, score_transition
from envace.worldbench.simulator import PromptedSimulator

_safe = safe_name  # the name envace.sweeps.world_model imports


def subset(ts: list[Transition], limit: int | None, seed: int) -> list[Transition]:
    if limit is None or limit >= len(ts):
        return ts
    key = {t.id: hashlib.sha256(f"{seed}|{t.id}".encode()).hexdigest() for t in ts}
    keep = set(sorted(key, key=key.get)[:limit])
    return [t for t in ts if t.id in keep]  # file order kept


def load(cfg: ScoreConfig) -> tuple[list[Transition], list[Transition], dict[str, Any]]:
    dirs = source_dirs(cfg.data)
    wanted = cfg.sources or list(dirs)
    missing = [s.value for s in wanted if s not in dirs]
    if missing:
        raise FileNotFoundError(2, f"no transitions for source(s) {missing}; build them with `envace worldbench "
                                   f"build` (sources=...) or drop them from sources", str(cfg.data))
    test: list[Transition] = []
    train: list[Transition] = []
    manifest_path = Path(cfg.data) / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    hashes = {}
    for s in wanted:
        found = read_transitions(dirs[s] / "test.jsonl")
        if not found:  # scoring nothing would report 0 transitions as a result
            raise ValueError(f"{dirs[s] / 'test.jsonl'} holds no transitions; rebuild it with `envace worldbench "
                             f"build`, or leave {s.value} out of sources")
        test += subset(found, cfg.limit, cfg.seed)
        if (dirs[s] / "train.jsonl").is_file():
            train += read_transitions(dirs[s] / "train.jsonl")
        hashes[s.value] = (manifest.get("sources", {}).get(s.value) or {}).get("md5")
    return test, train, hashes


def score(cfg: ScoreConfig) -> dict[str, Any]:
    test, train, hashes = load(cfg)
    index = TrainIndex(train)
    predictors: list[tuple[str, Any]] = []
    for name in cfg.reference_rows:
        predictors.append((name, CopyLast(test, index) if name == "copy_last" else TypedEmpty(index)))
    if cfg.model is not None and cfg.model_prompt == "simulator":
        sim = PromptedSimulator(cfg, index)
        predictors.append((sim.name, sim))
    elif cfg.model is not None:
        m = model_predictor(cfg, index)
        predictors.append((f"model:{m.name}", m))
    out = Path(cfg.out)
    (out / "scores").mkdir(parents=True, exist_ok=True)
    rows: dict[str, Any] = {}
    per_row_scores = {}
    per_row_preds = {}
    for name, predictor in predictors:
        preds, wall = timed_predict(predictor, test)
        per_row_preds[name] = preds
        scores = [score_transition(t, p.text, p.note) for t, p in zip(test, preds)]
        per_row_scores[name] = scores
        path = out / "scores" / f"{safe_name(name)}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for s in scores:
                f.write(json.dumps(s.to_dict(), sort_keys=True, ensure_ascii=False, default=str) + "\n")
        rows[name] = {"wall_s": round(wall, 3), "n": len(scores),
                      "n_prompt_too_long": sum(s.note == PROMPT_TOO_LONG for s in scores),
                      "scores_file": str(path), "aggregate": aggregate(scores, cfg.bootstrap, cfg.seed)}
    result = {"config": cfg.model_dump(mode="json"), "data": {"dir": str(cfg.data), "md5": hashes},
              "n_test": len(test), "n_train": len(train),
              "sources": sorted({t.source.value for t in test}), "rows": rows}
    found = behaviour_metrics(cfg, test, index, predictors, per_row_preds, per_row_scores, out)
    if found:
        result["behaviour"] = found
    (out / "worldbench.json").write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    if cfg.tracking.enabled:
        result["mlflow_run_id"] = _log_mlflow(cfg, result, out)
        result["store"] = _store(cfg, per_row_scores, result, out)
        (out / "worldbench.json").write_text(json.dumps(result, indent=2, sort_keys=True, default=str) + "\n")
    return result


def metrics(result: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, row in result["rows"].items():
        key = safe_name(name)
        out[f"{key}/wall_s"] = float(row["wall_s"])
        agg = row["aggregate"]
        groups = {"all": agg["all"], **{s: v for s, v in agg["source"].items()}}
        for g, summary in groups.items():
            for m in MEANS + RATES:
                if summary.get(m) is not None:
                    out[f"{key}/{g}/{m}"] = float(summary[m])
            out[f"{key}/{g}/n"] = float(summary.get("n", 0))
    out.update(behaviour_flat(result.get("behaviour") or {}))
    return out


def _locations(cfg: ScoreConfig, out: Path) -> Any:
    """envace.tracking.locations: `<out>/mlflow.db` and `<out>/store.db` unless `tracking.*` names them."""
    from envace.tracking.locations import Kind, locations

    return locations(out, Kind.WORLDBENCH, mlflow_uri=cfg.tracking.mlflow_uri, store_url=cfg.tracking.store_url)


def _log_mlflow(cfg: ScoreConfig, result: dict[str, Any], out: Path) -> str:
    from envace.tracking.run_record import RunRecord

    with RunRecord(_locations(cfg, out)) as record:
        run = record.start_mlflow(cfg.tracking.experiment, "worldbench", cfg, kind="worldbench",
                                  parent_run_id=cfg.tracking.parent_run_id, input_paths=[cfg.data])
        run.log_step_metrics(0, metrics(result))
        run.log_artifact(out / "worldbench.json", "worldbench")
        return run.run_id


def _store(cfg: ScoreConfig, per_row: dict[str, list], result: dict[str, Any], out: Path) -> dict[str, Any]:
    from envace.store.session import upgrade
    from envace.store.worldbench_rows import put_worldbench_scores

    url = _locations(cfg, out).store_url
    upgrade(url)
    run_ids = {}
    for name, scores in per_row.items():
        run_ids[name] = put_worldbench_scores(url, name, [s.to_dict() for s in scores], config=result["config"],
                                              mlflow_run_id=result.get("mlflow_run_id"))
    return {"url": url, "run_ids": run_ids}


__all__ = ["load", "metrics", "score", "subset"]
