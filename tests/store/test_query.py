"""Query API: every filter, sort and page checked against a plain Python filter over the same seeded
trajectories (the reference is computed from the Trajectory objects, not from the database)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from envace.fidelity import fidelity_metrics
from envace.store.models import TrajectoryMode, TrajectoryRow
from envace.store.query import (
    TrajectoryFilter,
    fidelity_by_tool,
    get_trajectory,
    list_runs,
    list_trajectories,
    role_stats,
    run_summary,
    step_curve,
)
from envace.store.runs import RunInfo
from envace.store.session import make_engine, read_only_session
from envace.store.synthetic import WORDS, synthetic_trajectory
from envace.store.writer import TrajectoryWriter
from envace.types import Role, TerminationReason

RUNS = ("run-1", "run-2", "run-3")


@dataclass
class Ref:
    id: int
    run_id: str
    step: int
    split: str
    mode: TrajectoryMode
    prompt_id: str
    reward: float | None
    termination: TerminationReason | None
    n_turns: int
    roles: set
    texts: list[str]
    traj: object


@pytest.fixture(scope="module")
def seeded(module_store_url):
    store_url = module_store_url
    refs: list[Ref] = []
    for r, run in enumerate(RUNS):
        with TrajectoryWriter(store_url, run, batch_size=64, run=RunInfo(run, name=f"n{r}")) as w:
            for step in range(8):
                for mode, split in ((TrajectoryMode.TRAIN, "train"), (TrajectoryMode.EVAL, "test")):
                    if mode is TrajectoryMode.EVAL and step % 3:
                        continue
                    trajs = []
                    for p in range(4):
                        for s in range(3):
                            n_gen = 1 if (p + s + step) % 5 == 0 else None  # no Rehearse turn at all
                            t = synthetic_trajectory(r, step * 10 + (mode is TrajectoryMode.EVAL), p, s, n_gen=n_gen)
                            if (p, s, step) == (1, 1, 2):
                                t.turns[0].text = "progress 100%_done"
                            if (p, s, step) == (2, 0, 3):
                                t.turns[-1].text = "REFUND issued"
                            trajs.append(t)
                            users = {u.user_turn for u in t.turns}
                            refs.append(Ref(-1, run, step, split, mode, t.task.uuid, t.reward, t.termination,
                                            len(t.turns), {u.role for u in t.turns} | {Role.USER},
                                            [u.text for u in t.turns] + [t.task.user_turns[u] for u in users], t))
                    w.put(trajs, step=step, mode=mode, split=split)
    engine = make_engine(store_url)
    with engine.connect() as c:
        ids = {(r.run_id, r.step, r.mode.value, r.prompt_index, r.sample_index, r.split): r.id
               for r in c.execute(sa.select(TrajectoryRow))}
    engine.dispose()
    for ref in refs:
        t = ref.traj
        ref.id = ids[(ref.run_id, ref.step, ref.mode.value, t.prompt_index, t.sample_index, ref.split)]
    return store_url, refs


def matches(ref: Ref, f: TrajectoryFilter) -> bool:
    checks = [
        f.run_id is None or ref.run_id == f.run_id,
        f.run_ids is None or ref.run_id in f.run_ids,
        f.step_min is None or ref.step >= f.step_min,
        f.step_max is None or ref.step <= f.step_max,
        f.split is None or ref.split == f.split,
        f.mode is None or ref.mode == f.mode,
        f.reward_min is None or (ref.reward is not None and ref.reward >= f.reward_min),
        f.reward_max is None or (ref.reward is not None and ref.reward <= f.reward_max),
        f.role is None or f.role in ref.roles,
        f.termination is None or ref.termination == f.termination,
        f.prompt_id is None or ref.prompt_id == f.prompt_id,
        not f.text or any(f.text.lower() in x.lower() for x in ref.texts),
    ]
    return all(checks)


def reference_page(refs, f, sort, page, size):
    key = sort.lstrip("-")
    rows = [r for r in refs if matches(r, f)]

    def k(r: Ref):
        v = getattr(r, key)
        return ((-1.0 if v is None else v) if key == "reward" else v, r.id)

    rows.sort(key=k, reverse=sort.startswith("-"))
    return [r.id for r in rows[(page - 1) * size: page * size]], len(rows)


def random_filter(rng: random.Random) -> TrajectoryFilter:
    kw: dict = {}
    if rng.random() < 0.7:
        kw["run_id"] = rng.choice(RUNS)
    elif rng.random() < 0.5:
        kw["run_ids"] = rng.sample(RUNS, 2)
    if rng.random() < 0.4:
        lo = rng.randint(0, 7)
        kw["step_min"], kw["step_max"] = lo, rng.randint(lo, 7)
    if rng.random() < 0.3:
        kw["mode"] = rng.choice(list(TrajectoryMode)[:2])
    if rng.random() < 0.2:
        kw["split"] = rng.choice(["train", "test"])
    if rng.random() < 0.4:
        lo = round(rng.random(), 2)
        kw["reward_min"] = lo
        if rng.random() < 0.5:
            kw["reward_max"] = round(rng.uniform(lo, 1), 2)
    if rng.random() < 0.3:
        kw["role"] = rng.choice([Role.REHEARSE, Role.ACT, Role.ENV])
    if rng.random() < 0.3:
        kw["termination"] = rng.choice(list(TerminationReason))
    if rng.random() < 0.15:
        kw["prompt_id"] = f"task-{rng.randint(0, 3):06d}"
    if rng.random() < 0.25:
        kw["text"] = rng.choice([w.upper() for w in WORDS[:4]] + ["0%_d", "refund iss", "nowhere"])
    return TrajectoryFilter(**kw)


def test_random_filters_sorts_and_pages_match_python(seeded):
    url, refs = seeded
    rng = random.Random(7)
    nonempty = 0
    with read_only_session(url) as s:
        for _ in range(60):
            f = random_filter(rng)
            sort = rng.choice(["step", "-step", "reward", "-reward", "n_turns", "-n_turns", "id", "-id"])
            size = rng.choice([1, 5, 20, 50])
            want_all, n = reference_page(refs, f, sort, 1, 10_000)
            page = rng.randint(1, max(1, -(-n // size)))
            want, _ = reference_page(refs, f, sort, page, size)
            got = list_trajectories(s, f, sort=sort, page=page, page_size=size)
            assert [x.id for x in got.items] == want, (f, sort, page, size)
            assert (got.total, got.total_exact) == (n, True)
            nonempty += bool(want)
    assert nonempty > 30  # the filters are not all trivially empty


def test_special_filters_by_hand(seeded):
    url, refs = seeded
    with read_only_session(url) as s:
        pct = list_trajectories(s, TrajectoryFilter(text="0%_d"))  # % and _ are literal, not wildcards
        assert pct.total == 3 and all(get_trajectory(s, x.id).turns[1].text == "progress 100%_done" for x in pct.items)
        # step 3 has a train and an eval group in each of the 3 runs
        assert list_trajectories(s, TrajectoryFilter(text="refund ISSUED")).total == 6
        # a trajectory with one generation has no Rehearse turn
        no_reh = [r.id for r in refs if Role.REHEARSE not in r.roles]
        with_reh = list_trajectories(s, TrajectoryFilter(role="rehearse"), page_size=1000)
        assert no_reh and not set(no_reh) & {x.id for x in with_reh.items}
        assert with_reh.total == len(refs) - len(no_reh)
        bounded = list_trajectories(s, TrajectoryFilter(run_id="run-1"), count_limit=10)
        assert (bounded.total, bounded.total_exact, len(bounded.items)) == (10, False, 50)


def test_aggregates_match_python(seeded):
    url, refs = seeded
    mine = [r for r in refs if r.run_id == "run-2"]
    with read_only_session(url) as s:
        summary = run_summary(s, "run-2")
        curve = step_curve(s, "run-2", mode="train")
        tools = fidelity_by_tool(s, "run-2")
        roles = role_stats(s, TrajectoryFilter(run_id="run-2", step_max=3))
        runs = list_runs(s)
        assert run_summary(s, "nope") is None and get_trajectory(s, 10**9) is None
    assert summary.run.name == "n1" and summary.n_trajectories == len(mine)
    assert (summary.first_step, summary.last_step) == (0, 7)
    for ms in summary.by_mode:
        group = [r.reward for r in mine if r.mode == ms.mode and r.split == ms.split]
        scored = [x for x in group if x is not None]
        assert (ms.n, ms.n_scored) == (len(group), len(scored))
        assert ms.mean_reward == pytest.approx(sum(scored) / len(scored))
    assert sum(summary.terminations.values()) == len(mine)
    for p in curve:
        group = [r.reward for r in mine if r.step == p.step and r.mode is TrajectoryMode.TRAIN]
        scored = [x for x in group if x is not None]
        assert p.n == len(group) and p.mean_reward == pytest.approx(sum(scored) / len(scored))
    # fidelity per tool recomputed from the Trajectory objects
    per_tool: dict[str, list] = {}
    for r in mine:
        for t in r.traj.turns:
            if t.role is Role.REHEARSE and t.real_observation is not None:
                per_tool.setdefault(t.call.name, []).append(fidelity_metrics(t.text, t.real_observation.content))
    assert [t.tool for t in tools] == sorted(per_tool)
    for t in tools:
        scores = per_tool[t.tool]
        assert t.n == len(scores)
        assert t.exact_match == pytest.approx(sum(x["exact_match"] for x in scores) / len(scores))
        assert t.field_f1 == pytest.approx(sum(x["field_f1"] for x in scores) / len(scores))
    act = next(x for x in roles if x.role is Role.ACT)
    act_turns = [t for r in mine if r.step <= 3 for t in r.traj.turns if t.role is Role.ACT]
    assert act.n_turns == len(act_turns)
    assert act.mean_advantage == pytest.approx(sum(t.advantage for t in act_turns) / len(act_turns))
    assert {r.id for r in runs.items} == set(RUNS) and runs.total == 3


def test_bad_queries_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="mode='nope'.*tts-commit"):
        TrajectoryFilter(mode="nope")
    with pytest.raises(ValueError, match="step_min=5 is greater than step_max=2"):
        TrajectoryFilter(step_min=5, step_max=2)
    with pytest.raises(ValueError, match="run_ids must be a list"):
        TrajectoryFilter(run_ids="run-1")
    with TrajectoryWriter(tmp_path / "s.db", "r"):
        pass
    with read_only_session(tmp_path / "s.db") as s:
        with pytest.raises(ValueError, match="sort 'rewards' is not one of"):
            list_trajectories(s, sort="rewards")
        with pytest.raises(ValueError, match="page=0"):
            list_trajectories(s, page=0)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        with read_only_session(tmp_path / "missing.db"):
            pass
