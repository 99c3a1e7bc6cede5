"""TrajectoryWriter: round trip of a hand-built trajectory, idempotence, untrusted content, errors."""

from __future__ import annotations

import math
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from envace.store.ingest import count_rows
from envace.store.models import TrajectoryMode
from envace.store.query import TrajectoryFilter, get_trajectory, list_trajectories
from envace.store.runs import RunInfo
from envace.store.session import make_engine, read_only_session
from envace.store.synthetic import stored_turns, synthetic_trajectory
from envace.store.writer import StoreWriteError, TrajectoryWriter
from envace.types import (
    ErrorCode,
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


def hand_trajectory(prompt_index: int = 0, sample_index: int = 0) -> Trajectory:
    task = Task(uuid="task-hand", tools=[], domain="retail",
                messages=[Message("system", "sys"), Message("user", "where is order 7?"),
                          Message("assistant", "x"), Message("user", "cancel it")])
    call = ToolCall("get_order", {"id": "7"})
    act1 = Turn(Role.ACT, [1, 2], [5, 6, 7, 8], [-1.0, -2.0, -3.0, -6.0], "<tool_call>...</tool_call>", 1.0,
                user_turn=0, tool_calls=[call], advantage=0.5)
    reh = Turn(Role.REHEARSE, [1], [9, 9], [-0.5, -1.5],
               '<execution_result>\n{"id": "7", "status": "shipped", "eta": 3}\n</execution_result>', 0.01,
               user_turn=0, call=call,
               observation=Observation({"id": "7", "status": "shipped", "eta": 3}, Role.REHEARSE),
               real_observation=Observation({"id": "7", "status": "pending", "eta": 3}, Role.ENV), advantage=-0.25)
    act2 = Turn(Role.ACT, [1], [4], [-0.1], "It is on its way.", 1.0, user_turn=0, advantage=0.5)
    act3 = Turn(Role.ACT, [1], [3, 3], [-0.2, -0.4], "<tool_call>{bad", 1.0, user_turn=1,
                parse_error=ErrorCode.JSON_DECODE, advantage=None)
    items = [{"user_turn": 0, "item_id": "c0", "weight": 0.5, "passed": True, "question": "found the order?"},
             {"user_turn": 1, "item_id": "c1", "weight": 0.5, "passed": False, "question": "cancelled?"}]
    return Trajectory(task=task, prompt_index=prompt_index, sample_index=sample_index, mode=Mode.REHEARSE,
                      turns=[act1, reh, act2, act3], termination=TerminationReason.MAX_TURNS, reward=0.5,
                      reward_breakdown={"items": items, "score": 0.5}, env_calls=1)


def test_round_trip_of_a_hand_built_trajectory(store_url):
    with TrajectoryWriter(store_url, "run-a", run=RunInfo("run-a", name="hand", config={"lr": 0.1})) as w:
        w.put([hand_trajectory()], step=3, mode="eval", split="test")
    with read_only_session(store_url) as s:
        page = list_trajectories(s, TrajectoryFilter(run_id="run-a"))
        assert page.total == 1
        rec = get_trajectory(s, page.items[0].id)
    t = rec.summary
    assert (t.step, t.mode, t.split, t.prompt_id, t.domain) == (3, TrajectoryMode.EVAL, "test", "task-hand", "retail")
    assert (t.reward, t.termination, t.n_turns, t.n_tool_calls, t.env_calls) == \
        (0.5, TerminationReason.MAX_TURNS, 4, 1, 1)
    assert rec.reward_breakdown == {"score": 0.5}
    # USER rows open each user turn: user0, act, rehearse, act, user1, act
    assert [x.role for x in rec.turns] == [Role.USER, Role.ACT, Role.REHEARSE, Role.ACT, Role.USER, Role.ACT]
    assert [x.text for x in rec.turns][0::4] == ["where is order 7?", "cancel it"]
    act1 = rec.turns[1]
    assert act1.n_tokens == 4 and act1.logprob_mean == -3.0 and act1.logprob_min == -6.0
    assert act1.tool_calls == [ToolCall("get_order", {"id": "7"})] and act1.advantage == 0.5
    assert rec.turns[5].parse_error is ErrorCode.JSON_DECODE and rec.turns[5].advantage is None
    assert rec.turns[2].observation == Observation({"id": "7", "status": "shipped", "eta": 3}, Role.REHEARSE)
    assert [(i.item_id, i.weight, i.passed) for i in rec.reward_items] == [("c0", 0.5, True), ("c1", 0.5, False)]
    (pair,) = rec.fidelity_pairs
    assert (pair.turn_index, pair.tool_name, pair.json_valid, pair.schema_ok, pair.exact_match) == \
        (2, "get_order", True, True, False)
    # leaves: id, status, eta; 2 of 3 agree -> precision = recall = 2/3
    assert pair.field_f1 == pytest.approx(2 / 3)
    assert pair.real == {"id": "7", "status": "pending", "eta": 3}


def test_same_step_twice_is_stored_once(store_url):
    trajs = [synthetic_trajectory(1, 0, p, s) for p in range(4) for s in range(3)]
    with TrajectoryWriter(store_url, "run-b", batch_size=5) as w:
        w.put(trajs, step=0)
        w.put(trajs, step=0)  # same keys again in the same writer
        w.put(trajs, step=0, mode="eval")  # another mode is another key
    assert (w.n_inserted, w.n_skipped) == (24, 12)
    with TrajectoryWriter(store_url, "run-b") as w2:  # a resumed run re-writes step 0
        w2.put(trajs, step=0)
    assert (w2.n_inserted, w2.n_skipped) == (0, 12)
    engine = make_engine(store_url)
    with engine.connect() as c:
        counts = count_rows(c, "run-b")
    engine.dispose()
    assert counts["trajectories"] == 24
    assert counts["turns"] == 2 * sum(stored_turns(t) for t in trajs)
    assert counts["reward_items"] == 2 * 2 * len(trajs)


def test_a_rewrite_with_other_content_never_mixes_turns(store_url):
    first = synthetic_trajectory(0, 0, 0, 0, n_gen=3)
    second = synthetic_trajectory(0, 0, 0, 0, n_gen=9)  # same key, longer: a different attempt
    with TrajectoryWriter(store_url, "run-m") as w:
        w.put([first], step=0)
        w.flush()
        w.put([second], step=0)
    with read_only_session(store_url) as s:
        (item,) = list_trajectories(s).items
        rec = get_trajectory(s, item.id)
    assert item.n_turns == 3 and len(rec.turns) == stored_turns(first)
    assert [t.text for t in rec.turns if t.role is not Role.USER] == [t.text for t in first.turns]


def test_a_key_repeated_within_one_batch_is_stored_once_with_its_first_children(store_url):
    first = synthetic_trajectory(0, 0, 0, 0, n_gen=3)
    second = synthetic_trajectory(0, 0, 0, 0, n_gen=7)  # same key, other content
    with TrajectoryWriter(store_url, "run-k", max_delay=3600) as w:  # both reach one transaction
        w.put([first], step=0)
        w.put([second, synthetic_trajectory(0, 0, 1, 0, n_gen=3)], step=0)
    assert (w.n_inserted, w.n_skipped) == (2, 1)
    with read_only_session(store_url) as s:
        items = list_trajectories(s, sort="step").items
        rec = get_trajectory(s, next(x.id for x in items if x.prompt_index == 0))
    assert len(items) == 2 and rec.summary.n_turns == 3
    assert [t.text for t in rec.turns if t.role is not Role.USER] == [t.text for t in first.turns]


def test_integers_beyond_64_bits_in_model_output_are_stored(store_url):
    traj = hand_trajectory()
    big = 123456789012345678901234567890
    traj.turns[1].text = f'<execution_result>{{"id": "7", "n": {big}}}</execution_result>'
    traj.turns[1].observation = Observation({"id": "7", "n": big}, Role.REHEARSE)
    with TrajectoryWriter(store_url, "run-i") as w:
        w.put([traj], step=0)
    with read_only_session(store_url) as s:
        rec = get_trajectory(s, list_trajectories(s).items[0].id)
    assert rec.turns[2].observation.content["n"] == big
    (pair,) = rec.fidelity_pairs
    assert pair.rehearsed == {"id": "7", "n": big} and pair.json_valid and not pair.exact_match


def test_untrusted_content_is_cleaned(store_url):
    traj = hand_trajectory()
    traj.turns[0].text = "null\x00byte"
    traj.turns[2].text = "lone \udc80 surrogate"
    traj.turns[0].tool_calls = [ToolCall("get\x00order", {"n": float("inf")})]
    traj.turns[0].logprobs = [float("-inf"), -1.0, float("nan")]
    traj.turns[1].observation = Observation({"x": float("nan"), "y": "a\x00b"}, Role.REHEARSE)
    traj.reward = float("nan")
    with TrajectoryWriter(store_url, "run-u") as w:
        w.put([traj], step=0)
    with read_only_session(store_url) as s:
        rec = get_trajectory(s, list_trajectories(s).items[0].id)
    assert rec.summary.reward is None
    assert rec.turns[1].text == "null\ufffdbyte"
    assert rec.turns[1].logprob_mean == -1.0 and rec.turns[1].logprob_min == -1.0
    assert rec.turns[2].observation.content == {"x": None, "y": "a\ufffdb"}
    assert rec.turns[3].text == "lone \ufffd surrogate"
    assert rec.turns[1].tool_calls == [ToolCall("get\ufffdorder", {"n": None})]


def test_bad_input_is_rejected_on_the_callers_thread(tmp_path):
    with TrajectoryWriter(tmp_path / "s.db", "run-x") as w:
        with pytest.raises(TypeError, match="envace.types.Trajectory"):
            w.put([{"not": "a trajectory"}], step=0)
        bad = hand_trajectory()
        bad.reward_breakdown = {"items": ["oops"]}
        with pytest.raises(ValueError, match=r"reward_breakdown\['items'\]\[0\]"):
            w.put([bad], step=0)
        with pytest.raises(ValueError, match="tts-commit"):
            w.put([hand_trajectory()], step=0, mode="testing")


def test_writer_thread_errors_are_raised_on_flush_and_stay(store_url):
    w = TrajectoryWriter(store_url, "run-e")
    engine = make_engine(store_url)
    with engine.begin() as c:
        c.execute(sa.text("DROP TABLE fidelity_pairs"))
    engine.dispose()
    w.put([hand_trajectory()], step=0)
    with pytest.raises(StoreWriteError, match="run-e") as info:
        w.flush()
    assert "fidelity_pairs" in str(info.value.__cause__)
    with pytest.raises(StoreWriteError):
        w.put([hand_trajectory(1)], step=1)
    with pytest.raises(StoreWriteError):
        w.close()


def test_read_only_session_cannot_write(store_url):
    with TrajectoryWriter(store_url, "run-r") as w:
        w.put([hand_trajectory()], step=0)
    with read_only_session(store_url) as s:
        with pytest.raises(sa.exc.DBAPIError, match="(?i)read.?only"):
            s.execute(sa.text("DELETE FROM turns"))
    engine = make_engine(store_url)
    with Session(engine) as s:
        assert s.execute(sa.text("SELECT count(*) FROM turns")).scalar_one() == 6
    engine.dispose()


def test_logprob_mean_matches_a_plain_loop(tmp_path):
    traj = synthetic_trajectory(3, 0, 0, 0, n_gen=6)
    with TrajectoryWriter(tmp_path / "s.db", "run-l") as w:
        w.put([traj], step=0)
    with read_only_session(tmp_path / "s.db") as s:
        rec = get_trajectory(s, list_trajectories(s).items[0].id)
    gens = [t for t in rec.turns if t.role is not Role.USER]
    for stored, src in zip(gens, traj.turns, strict=True):
        total = 0.0
        for lp in src.logprobs:
            total += lp
        assert math.isclose(stored.logprob_mean, total / len(src.logprobs), rel_tol=1e-12)
        assert stored.logprob_min == min(src.logprobs) and stored.temperature == src.temperature


def test_discard_after_drops_later_steps_with_their_children(store_url):
    first = {step: [synthetic_trajectory(0, step, p, 0, n_gen=3) for p in range(2)] for step in range(4)}
    with TrajectoryWriter(store_url, "run-d") as w:
        for step, trajs in first.items():
            w.put(trajs, step=step)
    with TrajectoryWriter(store_url, "run-d") as w2:  # resumed from the checkpoint of step 1
        assert w2.discard_after(1) == 4
        rerun = [synthetic_trajectory(9, 2, p, 0, n_gen=5) for p in range(2)]
        w2.put(rerun, step=2)
    engine = make_engine(store_url)
    with engine.connect() as c:
        counts = count_rows(c)  # whole tables: orphaned children would be counted too
        steps = sorted(r[0] for r in c.execute(sa.text("SELECT step FROM trajectories WHERE run_id = 'run-d'")))
    engine.dispose()
    assert steps == [0, 0, 1, 1, 2, 2]
    want = [*first[0], *first[1], *rerun]
    assert counts["turns"] == sum(stored_turns(t) for t in want)  # no orphaned turns of steps 2-3
    assert counts["reward_items"] == 2 * len(want)


def test_rows_commit_within_max_delay_while_puts_keep_coming(tmp_path):
    """A step every few ms never leaves the writer `max_delay` of quiet: the oldest pending row decides."""
    db = tmp_path / "s.db"
    seen, step = 0, 0
    with TrajectoryWriter(db, "run-t", max_delay=0.5, batch_size=10**6) as w:
        deadline = time.monotonic() + 60
        while seen == 0 and time.monotonic() < deadline:
            w.put([synthetic_trajectory(0, step, 0, 0, n_gen=3)], step=step)
            step += 1
            time.sleep(0.005)
            if step % 20 == 0:
                with read_only_session(db) as s:
                    seen = list_trajectories(s).total
        assert seen > 0  # committed while the puts went on, before any flush or close


def test_a_forgotten_close_still_commits_at_exit(tmp_path, run_python):
    db = tmp_path / "s.db"
    proc = run_python("""
        import sys
        from envace.store.synthetic import synthetic_trajectory
        from envace.store.writer import TrajectoryWriter
        w = TrajectoryWriter(sys.argv[1], "run-x", batch_size=1000, max_delay=3600)
        w.put([synthetic_trajectory(0, 0, p, 0) for p in range(5)], step=0)
        # no flush, no close: the interpreter exits with the rows still queued
    """, str(db))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    engine = make_engine(db)
    with engine.connect() as c:
        assert count_rows(c)["trajectories"] == 5
    engine.dispose()
