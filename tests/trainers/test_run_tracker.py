"""RunTracker: step metrics reach MLflow no later than the next flush (checkpoint) or close, each point
with its own step and time, and the trajectories reach the store."""

from __future__ import annotations

import sqlalchemy as sa
from mlflow.tracking import MlflowClient

from envace.store.synthetic import synthetic_trajectory
from envace.trainers.config import TrainConfig
from envace.trainers.run_tracker import RunTracker


def _history(uri: str, run_id: str, key: str) -> list[tuple[int, float, int]]:
    return sorted((m.step, m.value, m.timestamp) for m in MlflowClient(uri).get_metric_history(run_id, key))


def test_buffered_metrics_are_in_mlflow_after_flush_and_close(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = TrainConfig.model_validate({"model": str(tmp_path / "unused-model"), "out_dir": str(tmp_path / "run"),
                                      "tracking": {"mlflow_uri": uri, "store_url": str(tmp_path / "store.db")}})
    tracker = RunTracker(cfg)
    try:
        for step in (1, 2, 3):
            trajs = [synthetic_trajectory(0, step, p, 0, n_gen=3) for p in range(2)]
            tracker.log_step(step, {"reward/mean": step / 10, "loss": -step}, trajs)
        tracker.flush()  # a checkpoint: everything so far is in MLflow before it is written
        flushed = _history(uri, tracker.mlflow_run_id, "reward/mean")
        tracker.log_step(4, {"reward/mean": 0.4, "loss": -4}, [])
        tracker.log_step(4, {"reward/mean": 9.9, "loss": -9}, [])  # a re-run step is not logged twice
    finally:
        tracker.close()
    assert [(s, v) for s, v, _ in flushed] == [(1, 0.1), (2, 0.2), (3, 0.3)]
    final = _history(uri, tracker.mlflow_run_id, "reward/mean")
    assert [(s, v) for s, v, _ in final] == [(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)]
    stamps = [t for _, _, t in final]
    assert stamps == sorted(stamps)  # each point keeps the time it was logged, not the time it was sent
    assert [s for s, _, _ in _history(uri, tracker.mlflow_run_id, "loss")] == [1, 2, 3, 4]
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    with engine.connect() as c:
        steps = sorted(r[0] for r in c.execute(sa.text("SELECT step FROM trajectories")))
    engine.dispose()
    assert steps == [1, 1, 2, 2, 3, 3]
