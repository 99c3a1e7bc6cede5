"""The unscored-episode stop rule: the pure rule on hand-written step sequences, and the embedded trainer
with a judge that never answers (a closed port on 127.0.0.1) stopping at the configured step with one line
naming the judge, instead of running every step with no scored episode."""

from __future__ import annotations

import socket

import pytest

from envace.trainers.unscored_guard import UnscoredGuard, UnscoredGuardConfig, UnscoredRunStopped, episode_counts


def _observe_all(guard: UnscoredGuard, steps: list[tuple[int, int]]) -> int | None:
    """The step at which `guard` stops the run (None: it never does)."""
    for step, (unscored, total) in enumerate(steps, start=1):
        try:
            guard.observe(step, unscored, total)
        except UnscoredRunStopped:
            return step
    return None


def test_a_streak_above_the_threshold_stops_the_run():
    # shares: 1, 1, 0.25 (resets), 0.5 (not above 0.5), 0.75, 1, 1 -> the third of a streak is step 7
    steps = [(4, 4), (4, 4), (1, 4), (2, 4), (3, 4), (4, 4), (4, 4), (4, 4)]
    assert _observe_all(UnscoredGuard(threshold=0.5, patience=3), steps) == 7
    assert _observe_all(UnscoredGuard(threshold=0.5, patience=1), steps) == 1
    assert _observe_all(UnscoredGuard(threshold=1.0, patience=1), steps) is None  # 1 = never
    assert _observe_all(UnscoredGuard(threshold=0.5, patience=3), [(0, 0)] * 5) is None  # no episodes, no signal


def test_the_stop_is_one_line_naming_the_judge():
    guard = UnscoredGuard.from_config(UnscoredGuardConfig(threshold=0.5, patience=2), judge="Qwen3-30B-A3B at "
                                                                                          "http://judge:8000/v1")
    assert guard.observe(1, 3, 4) == 0.75
    with pytest.raises(UnscoredRunStopped) as err:
        guard.observe(2, 4, 4)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("step 2: 4 of 4 episodes unscored (100%); 2 steps in a row")
    assert "Qwen3-30B-A3B at http://judge:8000/v1" in msg
    with pytest.raises(ValueError, match="unscored episodes 5"):
        guard.observe(3, 5, 4)


def test_episode_counts_group_rows_by_episode():
    rows = [("u1_0", True), ("u1_0", True), ("u1_1", False), ("u1_1", False), ("u2_0", True), ("u2_0", False)]
    assert episode_counts(rows) == (2, 3)  # u1_1 and u2_0 (an episode with any unscored row) out of 3
    assert episode_counts([]) == (0, 0)


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_embedded_run_with_a_dead_judge_stops_at_the_configured_patience_step(tiny_model_dir, tmp_path, scored):
    from envace.trainers.config import TrainConfig
    from envace.trainers.embedded import train

    url = f"http://127.0.0.1:{_closed_port()}/v1"
    cfg = TrainConfig.model_validate(dict(
        model=str(tiny_model_dir), out_dir=str(tmp_path / "run"), steps=6, prompts_per_step=2, k=2, save_every=6,
        threads=1, progress=False, data={"n_tasks": 20}, shadow_monitor=False, tracking={"enabled": False},
        rollout={"max_assistant_turns": 2, "act": {"max_new_tokens": 8}, "rehearse": {"max_new_tokens": 8}},
        reward="checklist_llm", judge={"base_url": url, "model": "dead-judge", "max_retries": 0},
        judge_attempts=1, judge_retry_delay_s=0.0, unscored={"patience": 2}))
    with pytest.raises(UnscoredRunStopped) as err:
        train(cfg)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("step 2: 4 of 4 episodes unscored (100%); 2 steps in a row")
    assert "dead-judge" in msg or url in msg  # the judge is named
    assert len(scored) == 2 * 2 * 2 and all(t.reward is None for t in scored)  # unscored.patience steps, then stop
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())
