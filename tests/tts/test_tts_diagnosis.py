"""The test-time-rehearsal diagnosis (envace.evaluation.tts_diagnosis, tts_measures): the oracle bound's
isolation from the committed environment, the placebo notes, the paired rows against N = 0 on a
hand-worked case, and `envace tts diagnose` end to end on a real random tiny Qwen3 with the tool world.

The isolation and placebo tests use the scripted engine double (tests/episode_kit.py), so the policy really makes
state-changing calls (`add_stock`) whose traces can be followed into each environment; the CLI test runs the
real tiny model behind the real HF engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

import envace.tts.rollout as tts
from envace.config import RolloutConfig, SamplingConfig
from envace.evaluation.paired import TaskScores
from envace.evaluation.tts_diagnosis import Condition, TTSDiagnosisConfig, _scores, diagnose, run_condition
from envace.evaluation.tts_measures import paired_vs_base, placebo_memories
from envace.tts.config import TTSConfig
from envace.tts.prompts import ASSESS_MARK, MEMORY_HEADER, MEMORY_MARK
from envace.types import Mode, Role, Task, ToolCall, Trajectory

CFG = RolloutConfig(act=SamplingConfig(temperature=1.0, max_new_tokens=60),
                    rehearse=SamplingConfig(temperature=1.0, max_new_tokens=60),
                    max_assistant_turns=4, max_context_tokens=4096)
OPTS = TTSConfig(assess_max_tokens=30, memory_max_tokens=40, transcript_max_chars=2000)


def diag_cfg(**kw) -> TTSDiagnosisConfig:
    return TTSDiagnosisConfig(model="-", rollout=CFG, tts=OPTS, n=[2], modes=["parallel"], n_boot=500, **kw)


def adding_act(prompt: str, position: int) -> str:
    """Look up apples, add 3, then stop; fixed reviews and memories."""
    if ASSESS_MARK in prompt:
        return "Achieved: yes. Add 3 apples."
    if MEMORY_MARK in prompt:
        return "Use add_stock with apple and qty 3."
    done = prompt.count("<tool_response>")
    if done == 0:
        return '<tool_call>\n{"name": "get_stock", "arguments": {"item": "apple"}}\n</tool_call>'
    if done == 1:
        return '<tool_call>\n{"name": "add_stock", "arguments": {"item": "apple", "qty": 3}}\n</tool_call>'
    return "Done."


class Phase:
    """Tells environments whether the private phase is running (set by wrapping tts.rehearse_privately)."""
    private = False


@pytest.fixture
def phase(monkeypatch):
    real = tts.rehearse_privately

    def wrapped(*args, **kwargs):
        Phase.private = True
        try:
            return real(*args, **kwargs)
        finally:
            Phase.private = False

    monkeypatch.setattr(tts, "rehearse_privately", wrapped)
    return Phase


def tracked(kit, made: list):
    """A factory of ShopEnvs that records, per environment, whether it was made and used in the private phase."""

    class Tracked(kit.ShopEnv):
        def __init__(self):
            super().__init__()
            self.made_private, self.uses = Phase.private, []
            made.append(self)

        def reset(self, task):
            self.uses.append(Phase.private)
            self.task_uuid = task.uuid
            super().reset(task)

        def execute(self, call):
            self.uses.append(Phase.private)
            return super().execute(call)

    return Tracked


def one_turn_tasks(kit) -> list[Task]:
    return [kit.make_task("apples", ["Add 3 apples."], {"apple": 5, "pear": 7}),
            kit.make_task("more-apples", ["Please add 3 apples."], {"apple": 1, "pear": 9})]


def test_oracle_bound_rehearses_the_real_world_and_leaves_the_committed_env_untouched(tokenizer, kit, phase):
    tasks = one_turn_tasks(kit)
    committed, copies = [], []
    engine = kit.ScriptedEngine(tokenizer, act=adding_act, rehearse=None)  # the oracle never asks Rehearse
    trajs = run_condition(Condition("oracle", "oracle", 2, "parallel"), tasks, engine, diag_cfg(),
                          tracked(kit, committed), seed=3, copy_factory=tracked(kit, copies))
    # the private phase really ran in the world's copies: each rehearsal saw the true stock, then added 3
    for task, traj in zip(tasks, trajs):
        private = traj.tts["private"]
        assert len(private) == 2 and all(t.mode is Mode.ENV for t in private)
        start = task.initial_state["apple"]
        assert [json.loads(m.content)["stock"] for t in private for m in t.messages if m.role == "tool"] == \
            [start, start + 3] * 2
    assert len(copies) == 4 and all(e.made_private and all(e.uses) for e in copies)
    assert all(len(e.executed) == 2 for e in copies)
    # the committed run's environments: made after the private phase, one per task, touched only by it
    assert len(committed) == len(tasks) and not any(e.made_private or any(e.uses) for e in committed)
    assert not {id(e) for e in committed} & {id(e) for e in copies}
    for task, traj in zip(tasks, trajs):
        env = next(e for e in committed if e.task_uuid == task.uuid)
        calls = [c for u in traj.turns_of(Role.ACT) for c in u.tool_calls]
        assert env.executed == calls == [ToolCall("get_stock", {"item": "apple"}),
                                         ToolCall("add_stock", {"item": "apple", "qty": 3})]
        assert env.stock == {**task.initial_state, "apple": task.initial_state["apple"] + 3}
    assert all(r is Role.ACT for batch in engine.roles_per_batch() for r in batch)


def test_a_failed_oracle_is_its_own_error_row_and_the_rest_still_run(tokenizer, kit):
    from envace.worlds.environment import WorldEnvironment
    from envace.worlds.generator import generate_tasks

    def broken():
        raise RuntimeError("world copy unavailable")

    engine = kit.ScriptedEngine(tokenizer, act=adding_act, rehearse=kit.stock_result)
    res = diagnose(diag_cfg(), engine, generate_tasks(2, "test", 0), WorldEnvironment, copy_factory=broken)
    rows = {r["name"]: r for r in res["rows"]}
    assert rows["oracle N=2 parallel"]["error"] == "RuntimeError: world copy unavailable"
    assert all("error" not in r and "paired" in r for n, r in rows.items() if n != "oracle N=2 parallel")
    assert "agree_oracle" not in rows["N=0"]


def test_placebo_notes_have_the_header_and_the_memorys_length():
    own = ["memory of task zero", "short", ""]
    assert placebo_memories(own, "other") == ["short short short s", "memor", ""]
    assert placebo_memories(own, "empty") == ["", "", ""]
    assert placebo_memories(["alone"], "other") == [""]  # no other task's memory to borrow
    with pytest.raises(ValueError, match="placebo kind 'shuffled'"):
        placebo_memories(own, "shuffled")


@pytest.mark.parametrize("kind", ["empty", "other"])
def test_placebo_rows_commit_with_that_note_in_the_system_prompt(tokenizer, kit, kind):
    tasks = one_turn_tasks(kit)
    own = ["Use add_stock with apple and qty 3.", "Ask for pears."]
    # 35 and 14 characters: "Ask for pears." (14) + " " + itself + " " + "Ask f"; the first 14 of the other
    expected = {"empty": ["", ""], "other": ["Ask for pears. Ask for pears. Ask f", "Use add_stock "]}[kind]
    engine = kit.ScriptedEngine(tokenizer, act=adding_act, rehearse=None)
    trajs = run_condition(Condition(f"placebo: {kind}", "placebo", 2, "parallel", kind), tasks, engine,
                          diag_cfg(), kit.ShopEnv, seed=3, bound_memories=own)
    for task, traj, note, mine in zip(tasks, trajs, expected, own):
        assert traj.mode is Mode.ENV and traj.tts["private"] == []
        assert traj.messages[0].content == f"{task.system_prompt}\n\n{MEMORY_HEADER}\n{note}"
        assert len(note) == (len(mine) if kind == "other" else 0)
        assert MEMORY_HEADER in tokenizer.decode(traj.turns[0].prompt_ids)


def _traj(p: int, success: float, reward: float) -> Trajectory:
    t = Trajectory(task=Task(uuid=f"t{p}", tools=[], messages=[]), prompt_index=p, sample_index=0, mode=Mode.ENV)
    t.reward, t.reward_breakdown["success"] = reward, success
    return t


def test_rows_against_n0_are_paired_by_task_on_a_hand_worked_case():
    tasks = [Task(uuid=f"t{p}", tools=[], messages=[]) for p in range(3)]
    cfg = diag_cfg(seeds=[0, 1])
    # success per (task, seed): N=0 [[1,1],[1,0],[0,0]], other [[0,0],[1,0],[0,0]]; reward = success / 2
    n0 = [[_traj(p, s, s / 2) for p, s in enumerate(col)] for col in ([1, 1, 0], [1, 0, 0])]
    other = [[_traj(p, s, s / 2) for p, s in enumerate(col)] for col in ([0, 1, 0], [0, 0, 0])]
    base, alt = _scores(n0, tasks, cfg), _scores(other, tasks, cfg)
    assert base.success.tolist() == [[1, 1], [1, 0], [0, 0]] and alt.success.tolist() == [[0, 0], [1, 0], [0, 0]]
    got = paired_vs_base(base, alt, n_boot=20_000)
    # per-task differences of the seed means: [-1, 0, 0]. Bootstrap over 3 tasks: the mean is -K/3 with
    # K ~ Binomial(3, 1/3) -1s drawn; P(K=3) = 1/27 > 2.5 % so the lower end is -1; P(K=0) = 8/27 so the upper 0.
    assert got["unit"] == "tasks (checkpoint fixed)" and got["tasks"] == 3 and got["samples"] == 2
    s = got["success"]
    assert s["value"] == pytest.approx(1 / 6) and s["diff"] == pytest.approx(-1 / 3)
    assert (s["lo"], s["hi"]) == (pytest.approx(-1.0), pytest.approx(0.0))
    hw = stats.t.ppf(0.975, 2) * np.sqrt(1 / 3) / np.sqrt(3)  # sd of [-1, 0, 0] is sqrt(1/3)
    assert (s["t_lo"], s["t_hi"]) == (pytest.approx(-1 / 3 - hw), pytest.approx(-1 / 3 + hw))
    assert got["reward"]["diff"] == pytest.approx(-1 / 6) and got["reward"]["lo"] == pytest.approx(-0.5)
    # a row on other seeds is not paired with N=0
    with pytest.raises(ValueError, match="same seeds"):
        paired_vs_base(base, TaskScores(base.task_ids, [0, 2], 1, base.temperature, alt.success, alt.reward))


def envace(*args, timeout=600):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-m", "envace.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_cli_prints_the_table_and_writes_json_and_csv(tiny_dir, tmp_path):
    out = tmp_path / "diag"
    proc = envace("tts", "diagnose", str(tiny_dir), "n_tasks=2", "n=[1]", "modes=[parallel]", "n_boot=200",
                  f"out_dir={out}", "rollout.max_assistant_turns=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = ["N=0", "N=1 parallel", "oracle N=1 parallel", "placebo: empty note", "placebo: other note"]
    lines = proc.stdout.splitlines()
    assert [ln.split(" | ")[0] for ln in lines[1:6]] == names
    assert "unit: tasks (checkpoint fixed)" in proc.stdout and "Reading (success):" in proc.stdout
    res = json.loads((out / "tts_diagnosis.json").read_text())
    assert [r["name"] for r in res["rows"]] == names and res["failed"] == []
    assert all(r["paired"]["tasks"] == 2 for r in res["rows"])
    assert (out / "tts_diagnosis.csv").read_text().splitlines()[0].startswith("name,kind,n,mode,success")


def test_cli_bad_input_is_one_line_and_a_failing_exit(tiny_dir, tmp_path):
    proc = envace("tts", "diagnose", str(tiny_dir), "n=[0]")
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "n=[0]" in proc.stderr
    proc = envace("tts", "diagnose", str(tmp_path / "nothing"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
