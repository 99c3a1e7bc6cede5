"""`envace demo`: the whole method on the embedded default, end to end, on one CPU machine.

1. tool world: train / val / test splits exported as CM2 JSON and verl parquet, hashed;
2. tiny model: a Qwen3-architecture model and BPE tokenizer built from the world's corpus;
3. SFT cold start on oracle Act and Rehearse demonstrations;
4. EnvACE RL (rehearse mode, role-wise GRPO) — the policy never touches the real environment;
5. the same RL budget with standard GRPO in the real environment (the ablation baseline);
6. evaluation of SFT, EnvACE and GRPO with the real environment on held-out tasks (greedy and T=1),
   with rehearsal fidelity;
7. a small test-time-rehearsal sweep (N x parallel/sequential), paired with N = 0 and read against
   the oracle and placebo bounds of `envace tts diagnose`;
steps 1-5 run envace.pipeline's step functions (the ones the Prefect flow and the DVC stages run).
After SFT the two arms run side by side, one core each: EnvACE RL, its evaluation and the TTS sweep here,
SFT's evaluation and the GRPO baseline with its evaluation in a side process (envace.side_process) started
first: it opens the MLflow database and runs step 1 while this process imports, then imports during step 2
and builds half of SFT's samples; each arm's numbers are what it computes alone at one torch thread.
Everything is tracked in MLflow (one parent run, a child per stage) and the trajectory store, then it prints
how to open the MLflow UI and the dashboard. `--quick` is a one-minute smoke version.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from envace.config import BaseConfig
from envace.cpu_threads import cpu_jobs, usable_cpus
from envace.side_process import SideProcess
from envace.tts.config import DEMO_N_GRID


class DemoConfig(BaseConfig):
    out: str = Field("runs/demo", description="Output directory.")
    seed: int = Field(0, description="Seed of data, model and runs.")
    corpus_tasks: int = Field(600, ge=10, description="Tasks for the tokenizer corpus.")
    sft_tasks: int = Field(3000, ge=10, description="Demonstration tasks for SFT.")
    sft_budget_s: float = Field(300.0, gt=0, description="SFT wall-clock budget (used when sft_steps is None).")
    sft_steps: int | None = Field(1400, description="SFT steps (batch 16). The tiny model copies entities from the "
                                                   "request only after ~20 k sequences; 500 steps leave it near 0 %.")
    sft_length_groups: int = Field(1, ge=1, description="SFT length-grouped batches (SFTConfig.length_groups: "
                                                        "this many batches drawn at once and cut by length).")
    rl_steps: int = Field(12, ge=1, description="RL steps per method.")
    prompts_per_step: int = Field(8, ge=1, description="Prompts per RL step.")
    k: int = Field(4, ge=2, description="Trajectories per prompt.")
    lr: float = Field(1e-4, gt=0, description="RL learning rate.")
    eval_tasks: int = Field(100, ge=1, description="Held-out test tasks per evaluation.")
    eval_seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], description="Sampling seeds for T=1 evaluation.")
    tts_tasks: int = Field(20, ge=1, description="Tasks in the TTS sweep.")
    tts_n: list[int] = Field(default_factory=lambda: list(DEMO_N_GRID), description="Private rehearsal counts in "
                             "the TTS sweep (0 = the plain run).")
    baseline: bool = Field(True, description="Also train standard GRPO in the real environment.")
    side_by_side: bool = Field(True, description="After SFT, run the GRPO baseline's lane (SFT's evaluation, GRPO, "
                               "its evaluation) in a side process beside EnvACE's, one core each, where this "
                               "process may use two CPUs or more; otherwise one after the other.")


def quick_config(out: str) -> DemoConfig:
    return DemoConfig(out=out, corpus_tasks=60, sft_tasks=100, sft_steps=20, rl_steps=2, prompts_per_step=2, k=2,
                      eval_tasks=6, eval_seeds=[0], tts_tasks=3, tts_n=list(DEMO_N_GRID), baseline=True)


def _say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


_SCORES: dict[str, dict[str, Any]] = {}  # model name -> {"greedy"|"t1": TaskScores} of this demo run


def _paired_delta(name: str) -> dict[str, Any]:
    """`name` - SFT on the same test tasks and sampling seeds: difference and paired 95 % bootstrap interval."""
    from envace.evaluation.paired import compare

    return {mode: {m: {k: v[k] for k in ("diff", "boot_lo", "boot_hi")} for m, v in
                   compare(_SCORES["sft"][mode], _SCORES[name][mode], n_boot=4000).items() if isinstance(v, dict)}
            for mode in ("greedy", "t1")}


def _eval(model_dir: Path, cfg: DemoConfig, out: Path, name: str, store: str | None = None) -> dict[str, Any]:
    from envace.data.tasks import load_tasks
    from envace.engines.factory import make_engine
    from envace.evaluation.config import EvalConfig
    from envace.evaluation.eval_store import store_paired_eval
    from envace.evaluation.paired import score_tasks
    from envace.models.loading import load_policy

    ecfg = EvalConfig(model=str(model_dir), n_tasks=cfg.eval_tasks)
    model, tok = load_policy(model_dir)
    engine = make_engine(model, tok)
    tasks = load_tasks(ecfg.data, split="test", n=cfg.eval_tasks)
    # per-task scores (envace.evaluation.paired), so RL checkpoints are compared with SFT task by task
    # every episode also goes to the trajectory store (one eval run per model and temperature)
    with store_paired_eval(store, model_dir, ecfg, temperature=0.0, name=f"demo-{name}-greedy") as put:
        g_scores = score_tasks(engine, tasks, seeds=[0], temperature=0.0, rollout=ecfg.rollout, with_fidelity=True,
                               on_trajectories=put)
    with store_paired_eval(store, model_dir, ecfg, temperature=1.0, name=f"demo-{name}-t1") as put:
        t_scores = score_tasks(engine, tasks, seeds=cfg.eval_seeds, temperature=1.0, rollout=ecfg.rollout,
                               on_trajectories=put)
    greedy, sampled = g_scores.meta["summary"], t_scores.meta["summary"]
    res = {"greedy": greedy, "t1": sampled}
    (out / f"eval_{name}.json").write_text(json.dumps(res, indent=2, default=str))
    _SCORES[name] = {"greedy": g_scores, "t1": t_scores}
    return res


class RunPlace(BaseModel):
    """Where a demo lane writes: the demo's output directory (its SFT model where the pipeline puts it),
    tracking and store."""

    out: str
    mlflow_uri: str
    store: str
    parent_run_id: str

    @property
    def sft_model(self) -> str:
        from envace.pipeline import Layout

        return str(Layout.under(Path(self.out)).sft_model)


# what the side process imports after its first job, while step 2 runs: what its share of SFT's samples needs
# (the baseline lane's own imports come later, inside the lane, which has time to spare beside EnvACE's)
SIDE_MODULES = ("envace.trainers.sft_samples", "transformers")
# what this process imports while the side process runs its first job (MLflow, transformers, torch's training)
MAIN_MODULES = ("envace.tracking.mlflow_run", "envace.models.tiny", "envace.trainers.sft")


def _splits(cfg: DemoConfig, quick: bool) -> dict[str, int]:
    return {"train": 200 if quick else 2000, "val": 50, "test": cfg.eval_tasks}


def open_tracking_and_export(mlflow_uri: str, data_dir: str, counts: dict[str, int], seed: int) -> None:
    """The side process's first job, run while the demo's own process imports: the MLflow database's tables
    (created once, under envace.tracking.mlflow_run's lock) and step 1's splits."""
    from envace.pipeline import build_data
    from envace.tracking.mlflow_run import tracking_client

    tracking_client(mlflow_uri)
    build_data(data_dir, counts, seed)


def _task_samples_in_two(side: SideProcess):
    """SFT's per-task samples built in two halves at once, the second in the side process (with a pickled copy
    of the same tokenizer); concatenated in task order they are the samples one process builds
    (`task_samples`)."""
    from envace.trainers.sft_samples import task_samples

    def build(tasks: list, tokenizer: Any, cfg: Any) -> tuple[list, list]:
        half = len(tasks) // 2
        side.submit(task_samples, tasks[half:], tokenizer, cfg)
        acts, rehs = task_samples(tasks[:half], tokenizer, cfg)
        more_acts, more_rehs = side.result()
        return acts + more_acts, rehs + more_rehs

    return build


def _rl_lane(name: str, over: dict[str, Any], number: int, cfg: DemoConfig, run: RunPlace) -> dict[str, Any]:
    """RL from the SFT model with the demo's budget (`over`: the arm's rollout mode), then its evaluation."""
    from envace.pipeline import run_rl
    from envace.tracking.config import TrackingConfig
    from envace.trainers.config import TrainConfig

    _say(f"{number}/7 RL: {name} ({cfg.rl_steps} steps x {cfg.prompts_per_step} prompts x K={cfg.k})")
    out = Path(run.out)
    tcfg = TrainConfig.model_validate({
        "model": run.sft_model, "out_dir": str(out / name), "steps": cfg.rl_steps,
        "prompts_per_step": cfg.prompts_per_step, "k": cfg.k, "save_every": cfg.rl_steps, "seed": cfg.seed,
        "optim": {"lr": cfg.lr}, "data": {"n_tasks": 2000, "seed": cfg.seed + 1},
        "tracking": TrackingConfig(mlflow_uri=run.mlflow_uri, store_url=run.store, experiment="envace-demo",
                                   parent_run_id=run.parent_run_id).model_dump(), **over})
    res = run_rl(tcfg)
    return {name: {"wall_s": res["wall_s"], "steps": res["last_step"], "final_reward": res["reward/mean"]},
            f"eval_{name}": _eval(Path(res["checkpoint"]) / "policy", cfg, out, name, run.store)}


def baseline_lane(cfg: DemoConfig, run: RunPlace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The lane beside EnvACE's: SFT's evaluation, then standard GRPO in the real environment and its
    evaluation. Returns the summary entries and the per-task scores (for the paired deltas)."""
    part = {"eval_sft": _eval(Path(run.sft_model), cfg, Path(run.out), "sft", run.store)}
    part.update(_rl_lane("grpo_env", {"rollout": {"mode": "env"}}, 5, cfg, run))
    return part, {name: _SCORES[name] for name in ("sft", "grpo_env")}


def _stages(cfg: DemoConfig, quick: bool, run: RunPlace, parent: Any, side: SideProcess | None,
            summary: dict[str, Any]) -> dict[str, Any]:
    """Steps 1-6 into `summary` (the TTS sweep returned); with `side`, SFT's samples are built in two
    halves and the baseline's lane runs in the side process beside EnvACE's."""
    from envace.data.config import DataConfig
    from envace.models.tiny import TinyModelConfig
    from envace.pipeline import Layout, build_data, build_model, run_sft
    from envace.provenance.dvc_hash import input_hashes
    from envace.trainers.config import SFTConfig

    out = Path(run.out)
    layout = Layout.under(out)  # data, model and SFT model where the pipeline flow puts them
    if side is None:
        _say("1/7 tool world: exporting splits")
        build_data(layout.data, _splits(cfg, quick), cfg.seed)
    else:  # step 1 ran there (`open_tracking_and_export`); next it imports for its half of SFT's samples
        side.result()
        side.preload(SIDE_MODULES)
    parent.set_tags({f"data.{k}": v for k, v in input_hashes([layout.data]).items()})
    _say("2/7 tiny model: tokenizer + Qwen3-architecture model")
    model_dir = build_model(layout.model, cfg.corpus_tasks, TinyModelConfig(seed=cfg.seed))
    _say(f"3/7 SFT cold start ({cfg.sft_steps or cfg.sft_budget_s} {'steps' if cfg.sft_steps else 's'})")
    # the demo's SFT and RL read generated tasks (DataConfig seeds), not the exported files
    summary["sft"] = run_sft(SFTConfig(model=str(model_dir), out_dir=str(layout.sft), steps=cfg.sft_steps,
                                       time_budget_s=cfg.sft_budget_s, seed=cfg.seed,
                                       length_groups=cfg.sft_length_groups,
                                       data=DataConfig(n_tasks=cfg.sft_tasks, seed=cfg.seed)),
                             _task_samples_in_two(side) if side else None)
    with cpu_jobs(2 if side else None):  # two lanes side by side: one core each
        if side:
            side.submit(baseline_lane, cfg, run)
        elif cfg.baseline:
            summary.update(baseline_lane(cfg, run)[0])
        else:
            summary["eval_sft"] = _eval(Path(run.sft_model), cfg, out, "sft", run.store)
        summary.update(_rl_lane("envace", {"rollout": {"mode": "rehearse"}}, 4, cfg, run))
        _say("6/7 test-time rehearsal sweep")
        tts = _tts_sweep(out / "envace" / "checkpoints", cfg)
        if side:
            part, scores = side.result()
            summary.update(part)
            _SCORES.update(scores)
    return tts


def run_demo(out_dir: str | Path, quick: bool = False, cfg: DemoConfig | None = None) -> dict[str, Any]:
    from envace.pipeline import Layout
    from envace.tracking.locations import Kind, locations
    from envace.tracking.run_record import tracked_run

    cfg = cfg or (quick_config(str(out_dir)) if quick else DemoConfig(out=str(out_dir)))
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    loc = locations(out, Kind.DEMO)  # mlflow.db and store.db beside the results (envace.tracking.locations)
    mlflow_uri, store = loc.mlflow_uri, loc.store_url
    t_start = time.perf_counter()
    summary: dict[str, Any] = {}
    lanes = cfg.baseline and cfg.side_by_side and usable_cpus() >= 2
    # the side process starts first: it opens the MLflow database and runs step 1 while this process imports,
    # then imports for its half of SFT's samples while step 2 runs here
    with SideProcess(jobs=2) if lanes else contextlib.nullcontext() as side:
        if side:
            _say("1/7 tool world: exporting splits (side process)")
            side.submit(open_tracking_and_export, mlflow_uri, str(Layout.under(out).data), _splits(cfg, quick),
                        cfg.seed)
            for name in MAIN_MODULES:
                importlib.import_module(name)
        with tracked_run(mlflow_uri, "envace-demo", "demo", cfg, kind="demo") as parent:
            run = RunPlace(out=str(out), mlflow_uri=mlflow_uri, store=store, parent_run_id=parent.run_id)
            tts = _stages(cfg, quick, run, parent, side, summary)
            for name in ("envace", "grpo_env") if cfg.baseline else ("envace",):
                summary[f"delta_{name}"] = _paired_delta(name)
            summary["tts"], summary["tts_bounds"] = tts["rows"], tts["bounds"]
            summary["tts_reading"] = tts["reading"]
            _say("7/7 logging results")
            table = _table(summary)
            parent.log_artifact_dict(summary, "demo_summary.json")
            parent.log_step_metrics(0, {f"{row['model']}/{k}": v for row in table for k, v in row.items()
                                        if isinstance(v, float)})
    summary["wall_s"] = time.perf_counter() - t_start
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    _print_table(table)
    _print_tts(summary, cfg)
    _print_deltas(summary, cfg)
    print(f"\nTotal {summary['wall_s'] / 60:.1f} min. Results: {out / 'summary.json'}")
    print(f"MLflow UI:  .venv/bin/mlflow ui --backend-store-uri {mlflow_uri} --host 127.0.0.1 --port 5000")
    print(f"Dashboard:  .venv/bin/envace dashboard --store {store} --mlflow-uri {mlflow_uri}")
    return summary


def _tts_sweep(ckpt_root: Path, cfg: DemoConfig) -> dict[str, Any]:
    """N x mode on the EnvACE checkpoint, each row paired with N = 0 on the same tasks and seed, plus the
    oracle and placebo bounds of `envace tts diagnose` (envace.evaluation.tts_diagnosis) to read them by."""
    from envace.data.tasks import load_tasks
    from envace.evaluation.paired import engine_for
    from envace.evaluation.tts_diagnosis import TTSDiagnosisConfig, diagnose
    from envace.trainers.checkpoint import latest_checkpoint
    from envace.worlds.environment import WorldEnvironment

    model_dir = latest_checkpoint(ckpt_root).model_dir("policy")
    ns = sorted({n for n in cfg.tts_n if n > 0})
    dcfg = TTSDiagnosisConfig(model=str(model_dir), n_tasks=cfg.tts_tasks, seeds=[0], n=ns or [1], n_boot=4000,
                              oracle=bool(ns), placebo=bool(ns))
    tasks = load_tasks(dcfg.data, split="test", n=cfg.tts_tasks)
    res = diagnose(dcfg, engine_for(model_dir), tasks, WorldEnvironment)
    rows = [r for r in res["rows"] if r["kind"] == "base" or (r["kind"] == "tts" and r["n"] in ns)]
    return {"rows": rows, "bounds": [r for r in res["rows"] if r["kind"] in ("oracle", "placebo")],
            "reading": res["reading"], "tasks": len(tasks)}


def _table(summary: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name in ("sft", "envace", "grpo_env"):
        ev = summary.get(f"eval_{name}")
        if not ev:
            continue
        g, s = ev["greedy"], ev["t1"]
        rows.append({"model": name, "greedy_success": g["success"], "greedy_reward": g["reward"],
                     "t1_success": s["success"], "t1_success_seed_std": s["success_seed_std"], "t1_reward": s["reward"],
                     "tool_call_validity": g["tool_call_validity"],
                     "fidelity_exact": g.get("fidelity", {}).get("exact_match", 0.0),
                     "fidelity_exact_determined": g.get("fidelity", {}).get("determined_exact_match", 0.0),
                     "fidelity_json_valid": g.get("fidelity", {}).get("json_valid", 0.0)})
    return rows


def _print_table(rows: list[dict[str, Any]]) -> None:
    print("\nHeld-out test tasks, real environment:")
    print(f"{'model':10} {'greedy succ':>11} {'greedy rew':>10} {'T=1 succ':>12} {'T=1 rew':>8} {'valid':>6} "
          f"{'fid.exact':>9} {'fid.exact(determined)':>21}")
    for r in rows:
        print(f"{r['model']:10} {r['greedy_success']:11.3f} {r['greedy_reward']:10.3f} "
              f"{r['t1_success']:7.3f}±{r['t1_success_seed_std']:.3f} {r['t1_reward']:8.3f} "
              f"{r['tool_call_validity']:6.2f} {r['fidelity_exact']:9.3f} {r['fidelity_exact_determined']:21.3f}")


def _tts_line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"  {r['name']:22} error: {r['error']}"
    parts = []
    for m in ("success", "reward"):
        p = r.get("paired", {}).get(m)
        diff = "" if p is None or r["kind"] == "base" else f" ({p['diff']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}])"
        parts.append(f"{m} {r[m]:.3f}{diff}")
    return f"  {r['name']:22} " + "  ".join(parts)


def _print_tts(summary: dict[str, Any], cfg: DemoConfig) -> None:
    print(f"\nTest-time rehearsal (EnvACE checkpoint), change vs N=0 on the same {cfg.tts_tasks} test tasks and "
          "seed (paired bootstrap 95 % interval over tasks, checkpoint fixed):")
    for r in summary["tts"] + summary.get("tts_bounds", []):
        print(_tts_line(r))
    if summary.get("tts_reading"):
        print(f"  Reading: {summary['tts_reading']['success']}")
    print("  Bounds: oracle = rehearsal against private copies of the real world; placebo = the memory replaced by\n"
          "  an empty note or by another task's note of the same length. Full table: `envace tts diagnose MODEL`.")


def _print_deltas(summary: dict[str, Any], cfg: DemoConfig) -> None:
    print(f"\nRL effect: change vs SFT on the same {cfg.eval_tasks} test tasks and sampling seeds "
          f"(paired bootstrap 95 % interval; an interval that contains 0 is no measured effect):")
    for name in ("envace", "grpo_env"):
        d = summary.get(f"delta_{name}")
        if not d:
            continue
        parts = [f"{mode} {m} {v['diff']:+.3f} [{v['boot_lo']:+.3f}, {v['boot_hi']:+.3f}]"
                 for mode in ("greedy", "t1") for m, v in d[mode].items()]
        print(f"  {name:9} " + "; ".join(parts))
    print("  The demo's budgets are too small to move these beyond noise: its SFT still guesses calendar days\n"
          "  (bench/headroom.py) and its RL takes a few small steps. A budget that moves them (SFT 2800 steps on\n"
          "  6000 tasks, then 40 steps of 384 trajectories) and its numbers: docs/results.md, 'Learning signal'\n"
          "  (bench/learning_signal.py, configs/train/envace_signal.yaml).")
