"""Tracking overhead of the embedded trainer: per-step time with the trajectory store + MLflow ON vs OFF,
measured in the same process on the same tiny model, data and seeds.

    taskset -c 1 env OMP_NUM_THREADS=1 .venv/bin/python bench/tracking_overhead.py
    .venv/bin/python bench/tracking_overhead.py --pairs 6 --steps 10 --prompts 2 --k 4

A tiny model is built once by envace's own `init_tiny_model` on `world_corpus` (as
bench/learning_signal.py does). Then `--pairs` pairs of `envace train` runs (the real
`envace.trainers.embedded.train`), one with `tracking.enabled=false` and one with tracking on (an MLflow
run in a temp SQLite tracking store, trajectories into a temp SQLite trajectory store), alternated
OFF ON / ON OFF / ... so that drift of a shared machine falls on both arms. The same seeds give both arms
the same rollouts and updates (checked: the per-step training metrics must agree).

A step's time runs from one `tracker.log_step` call to the next (the bench substitutes a `RunTracker`
subclass that timestamps them; the last step ends when `close` is called): rollout, scoring, update, the
tracking of the step and, every `--save-every` steps, the checkpoint (both arms) with the store flush,
the MLflow metrics and the sample artifact (ON). The first step of a run is warm-up and not counted.

Two estimates of the overhead:
- A/B: mean per-step wall and CPU time (all threads of the process) per arm, ON/OFF - 1 over all steps
  and per run pair. On a shared machine both carry the neighbours' load (a busy sibling hyper-thread
  slows the CPU time too), which can swing a pair by tens of percent: read the spread over the pairs,
  and `--aa` (both arms off) measures that noise floor. One untimed warm-up run goes first.
- Direct: the time spent inside the tracker's calls on the training thread (split by call: store put
  and flush, MLflow metrics, the sample artifact) plus the extra CPU time of the background threads (the
  store writer), per step, as a share of an OFF step. It does not depend on what the rest of the step
  costs, so it holds its value on a noisy machine.
Setup (MLflow run creation, store schema) and close are reported apart, once per run. Goal:
overhead <= 3 %.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def timed_tracker_class():
    """RunTracker that records when each step's `log_step` starts and how long its own calls take (built
    on first use: `--help` loads neither torch nor the trainer)."""
    from envace.trainers.run_tracker import RunTracker

    class TimedTracker(RunTracker):

        log: dict | None = None  # set per run by `run_once`

        def __init__(self, *args, **kwargs):
            t0 = time.perf_counter()
            super().__init__(*args, **kwargs)
            self.log["setup_s"] = time.perf_counter() - t0

        def _mark(self) -> None:
            self.log["marks"].append((time.perf_counter(), time.process_time()))

        def _timed(self, name: str, fn, *args):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.log["calls"][name] = self.log["calls"].get(name, 0.0) + time.perf_counter() - t0

        def log_step(self, step, metrics, trajs):
            self._mark()
            self.log["metrics"].append({k: v for k, v in metrics.items() if not k.startswith("time/")})
            self._timed("log_step", super().log_step, step, metrics, trajs)

        def flush(self):
            self._timed("flush", super().flush)

        def close(self):
            self._mark()
            self._timed("close", super().close)

        # the parts of log_step / flush, for the breakdown (tracking on only)
        def _send_metrics(self):
            self._timed("  mlflow metrics", super()._send_metrics)

    return TimedTracker


def _timed_writer_calls(log: dict):
    """Wrap the store writer's put/flush and the sample artifact for the breakdown."""
    from envace.store.writer import TrajectoryWriter
    from envace.tracking.mlflow_run import MlflowRun

    saved = (TrajectoryWriter.put, TrajectoryWriter.flush, MlflowRun.log_artifact_dict)

    def wrap(name, fn):
        def inner(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                log["calls"][name] = log["calls"].get(name, 0.0) + time.perf_counter() - t0
        return inner

    TrajectoryWriter.put = wrap("  store put", saved[0])
    TrajectoryWriter.flush = wrap("  store flush", saved[1])
    MlflowRun.log_artifact_dict = wrap("  mlflow sample artifact", saved[2])

    def restore():
        TrajectoryWriter.put, TrajectoryWriter.flush, MlflowRun.log_artifact_dict = saved
    return restore


def run_once(tiny: Path, work: Path, index: int, on: bool, args: argparse.Namespace) -> dict:
    import envace.trainers.embedded as embedded
    from envace.trainers.config import TrainConfig

    log: dict = {"marks": [], "metrics": [], "calls": {}, "setup_s": 0.0}
    embedded.RunTracker.log = log  # the TimedTracker main() put in the trainer's place
    cfg = TrainConfig.model_validate({
        "model": str(tiny), "out_dir": str(work / f"run{index}_{'on' if on else 'off'}"), "steps": args.steps,
        "prompts_per_step": args.prompts, "k": args.k, "save_every": args.save_every, "seed": args.seed,
        "device": "cpu", "threads": args.threads, "progress": False,
        "data": {"n_tasks": 200, "seed": 1},
        "tracking": {"enabled": on, "experiment": "tracking-overhead",
                     "mlflow_uri": f"sqlite:///{work / 'mlflow' / 'mlflow.db'}",
                     "store_url": str(work / "store.db")}})
    (work / "mlflow").mkdir(exist_ok=True)
    restore = _timed_writer_calls(log)
    c0, m0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
    try:
        embedded.train(cfg)
    finally:
        restore()
    wall = time.perf_counter() - w0
    background_cpu = (time.process_time() - c0) - (time.thread_time() - m0)
    marks = log["marks"]  # one per step, then close: the steps after the first (warm-up)
    n = len(marks) - 1
    return {"on": on, "wall": [b[0] - a[0] for a, b in zip(marks, marks[1:])],
            "cpu": [b[1] - a[1] for a, b in zip(marks, marks[1:])], "run_wall_s": wall,
            "setup_s": log["setup_s"], "calls": {k: v / n for k, v in log["calls"].items()},
            "background_cpu_s": background_cpu / n, "metrics": log["metrics"]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=6, help="OFF/ON run pairs (alternating order)")
    ap.add_argument("--steps", type=int, default=10, help="training steps per run")
    ap.add_argument("--save-every", type=int, default=10, help="checkpoint (and store flush) every N steps "
                    "(TrainConfig's default)")
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step")
    ap.add_argument("--k", type=int, default=2, help="trajectories per prompt")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--aa", action="store_true", help="A/A control: both arms with tracking off; the A/B numbers "
                    "then show the machine's noise floor")
    ap.add_argument("--dir", default=None, help="work dir (default: a temp dir, removed at the end)")
    args = ap.parse_args(argv)
    import torch

    import envace.trainers.embedded as embedded
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    torch.set_num_threads(args.threads)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="tracking-overhead-"))
    work.mkdir(parents=True, exist_ok=True)
    original = embedded.RunTracker
    embedded.RunTracker = timed_tracker_class()
    try:
        tiny = init_tiny_model(world_corpus(200, seed=0), work / "tiny", TinyModelConfig(seed=0))
        run_once(tiny, work, 999, False, args)  # warm-up (page cache, torch), not counted
        runs = []
        for p in range(args.pairs):
            for on in ((False, True) if p % 2 == 0 else (True, False)):
                r = run_once(tiny, work, len(runs), on and not args.aa, args)
                r["on"] = on
                runs.append(r)
                print(f"run {len(runs) - 1} tracking={'ON ' if on else 'OFF'}: per-step wall "
                      + " ".join(f"{x:.2f}" for x in r["wall"]) + f" s, CPU mean {statistics.mean(r['cpu']):.2f} s; "
                      f"run {r['run_wall_s']:.1f} s", flush=True)
    finally:
        embedded.RunTracker = original
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)

    off = [r for r in runs if not r["on"]]
    on = [r for r in runs if r["on"]]
    same = all(r["metrics"] == runs[0]["metrics"] for r in runs)
    result: dict = {"pairs": args.pairs, "steps_per_run": args.steps, "save_every": args.save_every,
                    "prompts": args.prompts, "k": args.k, "identical_training": same, "aa_control": args.aa}
    if args.aa:
        print("\nA/A CONTROL: tracking is off in both arms ('ON' below is a second OFF arm)")
    print(f"\nper step ({sum(len(r['wall']) for r in off)} steps per arm; the first step of each run not counted):")
    for what in ("wall", "cpu"):
        m_off = statistics.mean(x for r in off for x in r[what])
        m_on = statistics.mean(x for r in on for x in r[what])
        # pair p holds runs 2p and 2p+1, OFF first when p is even
        per_pair = [statistics.mean(runs[2 * p + 1 - p % 2][what]) / statistics.mean(runs[2 * p + p % 2][what]) - 1
                    for p in range(args.pairs)]
        result[what] = {"off_s": m_off, "on_s": m_on, "overhead": m_on / m_off - 1,
                        "overhead_pair_median": statistics.median(per_pair), "overhead_per_pair": per_pair}
        print(f"  {what:4}: OFF {m_off * 1e3:6.1f} ms, ON {m_on * 1e3:6.1f} ms -> overhead {m_on / m_off - 1:+.1%} "
              f"(median over pairs {statistics.median(per_pair):+.1%}; pairs "
              + " ".join(f"{x:+.1%}" for x in per_pair) + ")")
    calls = {k: statistics.mean(r["calls"].get(k, 0.0) for r in on)
             for k in sorted({k for r in on for k in r["calls"]}, key=lambda k: (k.startswith(" "), k))}
    per_step = calls.get("log_step", 0.0) + calls.get("flush", 0.0)  # close is once per run, after the last step
    bg = {"off": statistics.mean(r["background_cpu_s"] for r in off),
          "on": statistics.mean(r["background_cpu_s"] for r in on)}
    direct = per_step + bg["on"] - bg["off"]
    result["tracker_calls_per_step_s"] = calls
    result["background_cpu_per_step_s"] = bg
    result["direct_overhead"] = direct / result["wall"]["off_s"]
    print(f"direct cost per step: tracker calls on the training thread {per_step * 1e3:.1f} ms + background threads' "
          f"CPU {(bg['on'] - bg['off']) * 1e3:.1f} ms (ON {bg['on'] * 1e3:.1f}, OFF {bg['off'] * 1e3:.1f}) = "
          f"{direct * 1e3:.1f} ms = {result['direct_overhead']:.1%} of an OFF step (goal <= 3 %)")
    for k, v in calls.items():
        if k != "close":
            print(f"  {k:26} {v * 1e3:7.2f} ms" + ("" if k.startswith(" ") else " (all of it)"))
    result["setup_s"] = statistics.mean(r["setup_s"] for r in on)
    result["close_s"] = statistics.mean(r["calls"].get("close", 0.0) * len(r["wall"]) for r in on)
    result["run_wall_s"] = {"off": statistics.mean(r["run_wall_s"] for r in off),
                            "on": statistics.mean(r["run_wall_s"] for r in on)}
    print(f"one-off per run (not in the steps): tracker setup {result['setup_s']:.2f} s (the first run creates the "
          f"MLflow database), close {result['close_s']:.2f} s; run wall OFF {result['run_wall_s']['off']:.1f} s, "
          f"ON {result['run_wall_s']['on']:.1f} s")
    print(f"same rollouts and updates in both arms: {'yes' if same else 'NO (the comparison is void)'}")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
