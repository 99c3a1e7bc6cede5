"""Trajectory-store benchmark: ingest rate, dashboard page latency, and the JSON-artifact scan it replaces.

    python bench/store_bench.py --turns 1000000            # a million turns, the goals' size (run on a quiet machine)
    python bench/store_bench.py --turns 200000 --queries 30

1. Ingest: `--turns` stored turns (10 per trajectory: 8 generations + 2 user turns) into ONE run through
   the real `TrajectoryWriter` (one put per step of 64 trajectories, flush at the end). The trajectories
   come from a pool of pre-generated synthetic ones re-keyed per step, so generation is not timed.
2. Page latency: `--queries` random dashboard questions (step range / reward range / role / termination /
   mode filters, sorted by step or reward, a random page among the first 20, 50 rows, with the bounded
   total count), each on a read-only session; p50 / p95 reported. Text-search questions are timed
   separately: a substring search is a scan of turn text, not an index lookup.
3. Baseline: the same questions answered the way a user who logged trajectories to MLflow as JSON
   artifacts would: one JSON file per step on disk, every file parsed, filtered and sorted in Python.
The ratio printed is scan median / store p95. Goals: page <= 50 ms, >= 100x faster than the
scan, ingest >= 20 k turns/s. CPU times are printed beside wall times: on a shared machine the wall
times measure the neighbours as much as the store.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from envace.store.models import TrajectoryMode
from envace.store.query import TrajectoryFilter, list_trajectories
from envace.store.session import read_only_session
from envace.store.synthetic import synthetic_trajectory
from envace.store.writer import TrajectoryWriter
from envace.types import Role, TerminationReason, Trajectory

PROMPTS, SAMPLES = 16, 4
PER_STEP = PROMPTS * SAMPLES
TURNS_PER_TRAJ = 10
RUN = "bench-run"


def traj_json(t: Trajectory, step: int, mode: str) -> dict:
    """What a user would dump per trajectory into a JSON artifact."""
    users = sorted({u.user_turn for u in t.turns})
    turns = [{"role": "user", "text": t.task.user_turns[u]} for u in users]
    turns += [{"role": u.role.value, "text": u.text, "tool_calls": [c.key() for c in u.tool_calls],
               "n_tokens": len(u.response_ids), "advantage": u.advantage} for u in t.turns]
    return {"run_id": RUN, "step": step, "mode": mode, "prompt_id": t.task.uuid, "prompt_index": t.prompt_index,
            "sample_index": t.sample_index, "reward": t.reward,
            "termination": t.termination.value if t.termination else None, "n_turns": len(t.turns), "turns": turns}


def steps_of(n_traj: int):
    """(step, mode, [(prompt, sample)]) groups: train every step, plus an eval group every 10th step."""
    step, left = 0, n_traj
    while left > 0:
        n = min(PER_STEP, left)
        yield step, TrajectoryMode.TRAIN, [(i // SAMPLES, i % SAMPLES) for i in range(n)]
        left -= n
        if step % 10 == 9 and left > 0:
            n = min(16, left)
            yield step, TrajectoryMode.EVAL, [(i // SAMPLES, i % SAMPLES) for i in range(n)]
            left -= n
        step += 1


def ingest(url: str, pool: list[Trajectory], n_traj: int, json_dir: Path) -> tuple[float, float, float, int]:
    """(store ingest wall seconds, its CPU seconds, json write seconds, last step)."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    k = 0
    last = 0
    with TrajectoryWriter(url, RUN) as w:
        for step, mode, keys in steps_of(n_traj):
            batch = []
            for p, s in keys:
                batch.append(dataclasses.replace(pool[k % len(pool)], prompt_index=p, sample_index=s))
                k += 1
            w.put(batch, step=step, mode=mode, split="train" if mode is TrajectoryMode.TRAIN else "test")
            last = step
        w.flush()
        t_store = time.perf_counter() - t0
        cpu_store = time.process_time() - c0  # both threads: comparable on a busy machine
    t1 = time.perf_counter()
    k = 0
    for step, mode, keys in steps_of(n_traj):
        rows = []
        for p, s in keys:
            rows.append(traj_json(dataclasses.replace(pool[k % len(pool)], prompt_index=p, sample_index=s), step,
                                  mode.value))
            k += 1
        (json_dir / f"step_{step:06d}_{mode.value}.json").write_text(json.dumps(rows))
    return t_store, cpu_store, time.perf_counter() - t1, last


def random_question(rng: random.Random, last_step: int) -> tuple[TrajectoryFilter, str, int]:
    kw: dict = {"run_id": RUN}
    kinds = rng.sample(["step", "reward", "role", "termination", "mode"], k=rng.randint(1, 3))
    if "step" in kinds:
        lo = rng.randint(0, last_step)
        kw["step_min"], kw["step_max"] = lo, min(last_step, lo + rng.randint(0, last_step // 2 + 1))
    if "reward" in kinds:
        lo = round(rng.uniform(0, 0.9), 2)
        kw["reward_min"], kw["reward_max"] = lo, round(min(1.0, lo + rng.uniform(0.05, 0.5)), 2)
    if "role" in kinds:
        kw["role"] = rng.choice([Role.ACT, Role.REHEARSE, Role.ENV])  # ENV: present in no trajectory
    if "termination" in kinds:
        kw["termination"] = rng.choice(list(TerminationReason))
    if "mode" in kinds:
        kw["mode"] = rng.choice([TrajectoryMode.TRAIN, TrajectoryMode.EVAL])
    return TrajectoryFilter(**kw), rng.choice(["step", "-step", "reward", "-reward"]), rng.randint(1, 20)


def scan_answer(json_dir: Path, f: TrajectoryFilter, sort: str, page: int, size: int = 50) -> tuple[list[tuple], int]:
    """The same question over the JSON files: parse everything, filter, sort, slice; (page, n matching)."""
    hits = []
    for path in sorted(json_dir.glob("*.json")):
        for t in json.loads(path.read_text()):
            if f.step_min is not None and not f.step_min <= t["step"] <= f.step_max:
                continue
            r = t["reward"]
            if f.reward_min is not None and (r is None or not f.reward_min <= r <= f.reward_max):
                continue
            if f.mode is not None and t["mode"] != f.mode.value:
                continue
            if f.termination is not None and t["termination"] != f.termination.value:
                continue
            if f.role is not None and not any(u["role"] == f.role.value for u in t["turns"]):
                continue
            if f.text and not any(f.text.lower() in u["text"].lower() for u in t["turns"]):
                continue
            hits.append(t)
    key = sort.lstrip("-")
    hits.sort(key=lambda t: -1.0 if t[key] is None else t[key], reverse=sort.startswith("-"))
    return [(t["step"], t["prompt_index"], t["sample_index"]) for t in hits[(page - 1) * size: page * size]], len(hits)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=1_000_000, help="stored turns to ingest (10 per trajectory)")
    ap.add_argument("--queries", type=int, default=30, help="random filtered page questions (>= 20)")
    ap.add_argument("--scan-queries", type=int, default=3, help="questions answered by the JSON scan")
    ap.add_argument("--url", default=None, help="store URL (default: a SQLite file in --dir)")
    ap.add_argument("--dir", default=None, help="work dir (default: a temp dir, removed at the end)")
    ap.add_argument("--pool", type=int, default=1024, help="distinct synthetic trajectories to cycle through")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="store-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    json_dir = work / "json_artifacts"
    json_dir.mkdir(exist_ok=True)
    url = args.url or str(work / "store.db")
    try:
        n_traj = args.turns // TURNS_PER_TRAJ
        pool = [synthetic_trajectory(args.seed, 0, i, 0, n_gen=8) for i in range(args.pool)]
        t_store, cpu_store, t_json, last = ingest(url, pool, n_traj, json_dir)
        n_turns = n_traj * TURNS_PER_TRAJ
        print(f"ingest: {n_traj} trajectories, {n_turns} turns in {t_store:.1f} s = {n_turns / t_store:,.0f} turns/s "
              f"({cpu_store:.1f} CPU s = {n_turns / cpu_store:,.0f} turns per CPU second; json artifacts written in "
              f"{t_json:.1f} s)", flush=True)
        rng = random.Random(args.seed)
        questions = [random_question(rng, last) for _ in range(args.queries)]
        lat, cpu, text_lat = [], [], []
        with read_only_session(url) as s:
            list_trajectories(s, TrajectoryFilter(run_id=RUN))  # warm the page cache once
            for f, sort, page in questions:
                t0, c0 = time.perf_counter(), time.thread_time()
                list_trajectories(s, f, sort=sort, page=page, page_size=50)
                lat.append(time.perf_counter() - t0)
                cpu.append(time.thread_time() - c0)
            for text in ("refund", "no-such-word"):
                t0 = time.perf_counter()
                list_trajectories(s, TrajectoryFilter(run_id=RUN, text=text), sort="-step")
                text_lat.append(time.perf_counter() - t0)
            check = [list_trajectories(s, f, count_limit=10**9).total for f, _, _ in questions[: args.scan_queries]]
        scan, scan_cpu = [], []
        for i, (f, sort, page) in enumerate(questions[: args.scan_queries]):
            t0, c0 = time.perf_counter(), time.thread_time()
            _, n_hits = scan_answer(json_dir, f, sort, page)
            scan.append(time.perf_counter() - t0)
            scan_cpu.append(time.thread_time() - c0)
            if n_hits != check[i]:  # same question, same answer set size, or the comparison is void
                print(f"warning: question {i}: the scan finds {n_hits} rows, the store {check[i]}", file=sys.stderr)
        p50, p95 = pct(lat, 0.5) * 1e3, pct(lat, 0.95) * 1e3
        cpu50, cpu95 = pct(cpu, 0.5) * 1e3, pct(cpu, 0.95) * 1e3
        scan_med, scan_cpu_med = statistics.median(scan) * 1e3, statistics.median(scan_cpu) * 1e3
        result = {"turns": n_turns, "trajectories": n_traj, "ingest_turns_per_s": n_turns / t_store,
                  "ingest_turns_per_cpu_s": n_turns / cpu_store,
                  "page_p50_ms": p50, "page_p95_ms": p95, "page_max_ms": max(lat) * 1e3,
                  "page_cpu_p50_ms": cpu50, "page_cpu_p95_ms": cpu95,
                  "text_search_ms": {"common": text_lat[0] * 1e3, "absent": text_lat[1] * 1e3},
                  "scan_median_ms": scan_med, "scan_cpu_median_ms": scan_cpu_med,
                  "speedup_scan_over_p95": scan_med / p95, "speedup_cpu": scan_cpu_med / cpu95, "queries": len(lat)}
        print(f"page ({len(lat)} random filtered+sorted 50-row pages): p50 {p50:.1f} ms, p95 {p95:.1f} ms, "
              f"max {max(lat) * 1e3:.1f} ms (CPU time: p50 {cpu50:.1f} ms, p95 {cpu95:.1f} ms)")
        print(f"text search: common word {text_lat[0] * 1e3:.0f} ms, absent word {text_lat[1] * 1e3:.0f} ms")
        print(f"json-artifact scan ({len(scan)} questions): median {scan_med:.0f} ms (CPU {scan_cpu_med:.0f} ms)")
        print(f"ratio scan median / store p95: {scan_med / p95:,.0f}x wall, {scan_cpu_med / cpu95:,.0f}x CPU time")
        print(json.dumps(result))
        return result
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
