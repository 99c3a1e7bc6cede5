"""Dashboard fixtures: a seeded trajectory store (SQLite in a temp dir, written through the real
`TrajectoryWriter` from the store's synthetic generator plus one hand-made trajectory whose text is
hostile HTML) and a seeded MLflow store (real MLflow on SQLite in a temp dir) holding two training runs
with per-step metrics, a sweep parent with its results tables and an evaluation run with a benchmark
report. Both are built once per session; `expected` carries the values the pages must show, computed
here from the inputs rather than read back through the dashboard.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from envace.benchmarks.base import BenchmarkResult
from envace.benchmarks.report import report_dict
from envace.evaluation.paired import TaskScores
from envace.store.query import TrajectoryFilter, list_trajectories
from envace.store.runs import RunInfo
from envace.store.session import read_only_session
from envace.store.synthetic import synthetic_trajectory
from envace.store.writer import TrajectoryWriter
from envace.sweeps.curves import curves_table
from envace.sweeps.paired_report import Cell, paired_table
from envace.sweeps.results import summarize
from envace.tracking.mlflow_run import resolve_tracking_uri, start_run
from envace.types import (
    CallRef,
    ChecklistItem,
    Message,
    Mode,
    Observation,
    Role,
    Task,
    TerminationReason,
    ToolCall,
    Trajectory,
    Turn,
)

XSS = "<script>alert(1)</script>"
HTML = "<b>bold</b>"
IMG = '<img src=x onerror="window.__xss=1">'

CONFIG_A = {"model": "models/tiny", "steps": 4, "k": 2, "seed": 0, "policy": "shared",
            "rollout": {"mode": "rehearse", "act": {"temperature": 1.0}, "rehearse": {"temperature": 1.0}},
            "optim": {"lr": 1e-4, "weight_decay": 0.01}, "algo": {"advantage": "role_grpo", "use_kl": False}}
CONFIG_B = {"model": "models/tiny", "steps": 4, "k": 2, "seed": 0, "policy": "shared",
            "rollout": {"mode": "env", "act": {"temperature": 1.0}, "rehearse": {"temperature": 1.0}},
            "optim": {"lr": 3e-4, "weight_decay": 0.01}, "algo": {"advantage": "role_grpo", "use_kl": False}}
DIFFERING_KEYS = {"rollout.mode", "optim.lr"}  # by hand from the two configs above

# the sweep flow's per-seed records (envace.sweeps.results.summarize turns them into results.csv)
SWEEP_SEEDS = {"envace": ("rehearse", [0.5, 0.6, 0.7]), "grpo": ("env", [0.4, 0.4, 0.5])}
# by hand: mean ± t(0.975, 2) · s / sqrt(3), t = 4.302653; envace s = 0.1, grpo s = 0.057735
SWEEP_EXPECTED = {"envace": (0.6, 0.248414, "0.600 ± 0.248"), "grpo": (0.433333, 0.143422, "0.433 ± 0.143")}
# per-arm training curves (envace.sweeps.curves.curves_table): {group: {step: values over seeds}} of
# shadow/exact_match; by hand: envace step 1 mean 0.7, t(0.975, 1) · s / sqrt(2) = 12.706205 · 0.141421 / 1.414214
CURVE_SEEDS = {"envace": {0: [0.5, 0.5], 1: [0.6, 0.8]}, "envace_t001": {0: [0.7], 1: [0.9]}}
CURVE_EXPECTED = {"envace": ([0, 1], [0.5, 0.7], [0.0, 1.2706205]), "envace_t001": ([0, 1], [0.7, 0.9], [0.0, 0.0])}
# the TTS flow runs N = 0 (the plain run) once (under the first mode); one seed each
TTS_CELLS = {(0, "parallel"): 0.40, (2, "parallel"): 0.45, (3, "parallel"): 0.47, (2, "sequential"): 0.48,
             (3, "sequential"): 0.50}
# the sweep's seed-level paired table (envace.sweeps.paired_report.paired_table) on 4 tasks x 3 seeds, one pass:
# per seed envace - base = [0.75, 0.75, 1.0] -> Δ 0.833, se 1/12, t = 10, p (2 df) = 1 - 10 / sqrt(102) = 0.00985
# (one comparison: Holm leaves it), all 3 seeds improved, IQM envace 1.000 / base 0.167, P(A > B) 1
PAIRED_SUCCESS = {"variant=base": [[0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0]],
                  "variant=envace": [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]}
PAIRED_EXPECTED = {"comparison": "variant=envace − variant=base", "Δ": "+0.833", "improved": "3/3", "p": "0.00985",
                   "p (Holm)": "0.00985", "IQM A / B": "1.000 / 0.167", "P(A > B)": "1.00", "verdict": "A > B"}
OURS = {"bfcl": 0.30, "tau2": 0.20, "vita": 0.10}  # fractions; the report shows percent; Overall 20.0


def metric_a(step: int) -> dict[str, float]:
    return {"reward/mean": 0.2 + 0.1 * step, "act/adv_mean": 0.01 * step, "rehearse/adv_mean": -0.01 * step,
            "act/kl": 0.001 * step, "rehearse/kl": 0.002 * step, "act/clip_frac": 0.05, "rehearse/clip_frac": 0.02,
            "rehearse/parse_error_rate": 0.5 - 0.1 * step, "fidelity/all/field_f1": 0.3 + 0.1 * step}


def metric_b(step: int) -> dict[str, float]:
    return {"reward/mean": 0.1 + 0.05 * step, "act/adv_mean": 0.02 * step, "act/clip_frac": 0.1}


def hostile_trajectory() -> Trajectory:
    """One Act call, its Rehearse answer and the real answer (they differ in `status`), a final reply;
    every text field carries markup that must be shown literally."""
    tool = {"type": "function", "function": {"name": "get_order", "parameters": {
        "type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}}
    task = Task(uuid="task-hostile", tools=[tool],
                messages=[Message("system", "sys"), Message("user", f"{HTML} please check {XSS} {IMG}"),
                          Message("assistant", "done")],
                checklists=[[ChecklistItem(id="c0", question=f"{HTML} handled?")]], domain="retail")
    call = ToolCall("get_order", {"id": XSS})
    rehearsed = {"id": XSS, "status": "ok", "note": HTML}
    real = {"id": XSS, "status": "shipped", "note": HTML}
    act = Turn(Role.ACT, [], [1, 2, 3], [-0.1, -0.2, -0.3],
               f"Looking it up {HTML} <tool_call>{json.dumps({'name': 'get_order', 'arguments': call.arguments})}"
               f"</tool_call>", 1.0, user_turn=0, tool_calls=[call], advantage=0.25)
    reh = Turn(Role.REHEARSE, [], [4, 5], [-0.5, -0.5],
               f"<execution_result>\n{json.dumps(rehearsed)}\n</execution_result>", 0.7, user_turn=0, call=call,
               observation=Observation(rehearsed, source=Role.REHEARSE),
               real_observation=Observation(real, source=Role.ENV), advantage=-0.5, answers=CallRef(0, 0))
    final = Turn(Role.ACT, [], [6, 7], [-0.1, -0.1], f"Done {HTML} {XSS} {IMG}", 1.0, user_turn=0, advantage=0.25)
    return Trajectory(task=task, prompt_index=99, sample_index=0, mode=Mode.REHEARSE, turns=[act, reh, final],
                      termination=TerminationReason.FINAL_REPLY, reward=0.75,
                      reward_breakdown={"items": [{"user_turn": 0, "item_id": "c0", "weight": 1.0, "passed": True,
                                                   "question": f"{HTML} handled?"}], "score": 0.75})


@dataclass
class Seeded:
    store: str
    mlflow_uri: str
    mlflow_ids: dict[str, str]
    hostile_id: int
    # (run, step, mode, split, prompt_id, sample, reward, termination, role set) per stored trajectory
    rows: list[tuple] = field(default_factory=list)


def _write_store(store: str, mlflow_ids: dict[str, str]) -> list[tuple]:
    rows = []
    plans = {"run-a": (CONFIG_A, 4, 4), "run-b": (CONFIG_B, 2, 2)}  # config, steps, prompts per step
    for run_id, (cfg, steps, prompts) in plans.items():
        info = RunInfo(id=run_id, name=f"name-{run_id}", config=cfg, mlflow_run_id=mlflow_ids[run_id],
                       status="finished")
        with TrajectoryWriter(store, run_id, run=info, batch_size=16) as w:
            seed = 1 if run_id == "run-a" else 2
            for step in range(steps):
                batch = [synthetic_trajectory(seed, step, p, s) for p in range(prompts) for s in range(2)]
                w.put(batch, step=step, mode="train", split="train")
                rows += [(run_id, step, "train", "train", t.task.uuid, t.sample_index, t.reward, t.termination,
                          {u.role for u in t.turns} | {Role.USER}) for t in batch]
            if run_id == "run-a":
                ev = [synthetic_trajectory(seed, steps - 1, 50 + p, 0) for p in range(4)]
                w.put(ev, step=steps - 1, mode="eval", split="test")
                rows += [(run_id, steps - 1, "eval", "test", t.task.uuid, 0, t.reward, t.termination,
                          {u.role for u in t.turns} | {Role.USER}) for t in ev]
                h = hostile_trajectory()
                w.put([h], step=2, mode="eval", split="test")
                rows.append((run_id, 2, "eval", "test", h.task.uuid, 0, h.reward, h.termination,
                             {Role.USER, Role.ACT, Role.REHEARSE}))
    return rows


def _write_mlflow(root: Path) -> tuple[str, dict[str, str]]:
    uri = resolve_tracking_uri(root)[0]
    ids = {}
    for run_id, cfg, fn in (("run-a", CONFIG_A, metric_a), ("run-b", CONFIG_B, metric_b)):
        with start_run(root, "envace", f"name-{run_id}", cfg) as r:
            for step in range(4):
                r.log_step_metrics(step, fn(step))
            ids[run_id] = r.run_id
    tables = root / "tables"
    (tables / "sweep").mkdir(parents=True)
    (tables / "tts").mkdir()
    records = [{"group": g, "levels": {"rollout.mode": mode}, "seed": i, "metrics": {"reward": v}}
               for g, (mode, values) in SWEEP_SEEDS.items() for i, v in enumerate(values)]
    summarize(records, ["rollout.mode"], ["reward"]).to_csv(tables / "sweep" / "results.csv", index=False)
    records = [{"group": f"n{n}-{m}", "levels": {"tts.n": n, "tts.mode": m}, "seed": 0, "metrics": {"reward": v}}
               for (n, m), v in TTS_CELLS.items()]
    summarize(records, ["tts.n", "tts.mode"], ["reward"]).to_csv(tables / "tts" / "results.csv", index=False)
    histories = [(g, {"shadow/exact_match": {step: vals[i] for step, vals in by_step.items()}})
                 for g, by_step in CURVE_SEEDS.items() for i in range(len(by_step[0]))]
    curves_table(histories).to_csv(tables / "sweep" / "curves.csv", index=False)
    cells = [Cell(f"{g},seed={seed}", g, "eval" if g.endswith("base") else "train", 0, seed, "/models/sft",
                  {"default": TaskScores(["t0", "t1", "t2", "t3"], [seed], 1, 0.0, [[v] for v in succ],
                                         [[v / 2] for v in succ])})
             for g, per_seed in PAIRED_SUCCESS.items() for seed, succ in enumerate(per_seed)]
    paired_table(cells, n_boot=200).to_csv(tables / "sweep" / "paired.csv", index=False)
    with start_run(root, "sweeps", "paper-ablations") as r:
        r.log_artifact(tables / "sweep" / "results.csv", "sweep")
        r.log_artifact(tables / "sweep" / "paired.csv", "sweep")
        r.log_artifact(tables / "sweep" / "curves.csv", "sweep")
        r.log_artifact(tables / "tts" / "results.csv", "tts")
        ids["sweep"] = r.run_id
    results = [BenchmarkResult(benchmark=name, categories={}, groups={}, overall=v, overall_definition="mean",
                               departures=[f"{name}: tiny model {HTML}"],
                               models={"policy": "tiny", "user_simulator": "sim-model", "judge": "judge-model"},
                               k=1, limit=5) for name, v in OURS.items()]
    with start_run(root, "eval", "eval-tiny") as r:
        r.log_artifact_dict(report_dict(results), "benchmarks/report.json")
        ids["eval"] = r.run_id
    return uri, ids


@pytest.fixture(scope="session")
def seeded(tmp_path_factory) -> Seeded:
    root = tmp_path_factory.mktemp("dash")
    uri, ids = _write_mlflow(root / "mlflow")
    store = str(root / "store.db")
    rows = _write_store(store, ids)
    with read_only_session(store) as s:
        page = list_trajectories(s, TrajectoryFilter(run_id="run-a", prompt_id="task-hostile"))
    assert len(page.items) == 1
    return Seeded(store=store, mlflow_uri=uri, mlflow_ids=ids, hostile_id=page.items[0].id, rows=rows)


@pytest.fixture(scope="session")
def empty_mlflow(tmp_path_factory) -> str:
    """An MLflow store with one run that logged a metric and no artifacts (the empty states)."""
    root = tmp_path_factory.mktemp("mlflow-empty")
    with start_run(root, "envace", "lonely") as r:
        r.log_step_metrics(0, {"reward/mean": 0.5})
    return resolve_tracking_uri(root)[0]


@pytest.fixture
def dash_env(monkeypatch, seeded):
    """Point the dashboard at the seeded store and MLflow (as the launcher does)."""
    monkeypatch.setenv("ENVACE_DASHBOARD_STORE", seeded.store)
    monkeypatch.setenv("ENVACE_DASHBOARD_MLFLOW_URI", seeded.mlflow_uri)
    return seeded


@pytest.fixture(scope="session")
def dc():
    """This module's constants for the tests (a bare `import conftest` could pick another directory's)."""
    return _THIS


def _wait_until_healthy(proc, port: int, log: Path, timeout_s: float) -> None:
    """Poll Streamlit's health endpoint until it answers ok; fail with the server log if the process
    exits or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5) as r:
                if r.read() == b"ok":
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"dashboard did not become ready (exit {proc.poll()}):\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


@pytest.fixture(scope="session")
def wait_until_healthy():
    """The health-poll helper (a fixture, since test modules cannot import this conftest by name)."""
    return _wait_until_healthy


# Captured while this module executes: later, sys.modules["conftest"] may be another directory's conftest.
_THIS = sys.modules[__name__]
