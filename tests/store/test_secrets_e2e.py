"""A database password never leaves the process: a real training run whose trajectory
store is a PostgreSQL URL with a password writes its trajectories there (so it connected with the real URL),
and `grep -rF <password>` (a plain one, and one with a slash, a space and a quote) over the run directory,
the MLflow store (database + artifacts) and a `pg_dump` of the trajectory store finds nothing, while the
masked URL is what every record holds."""

from __future__ import annotations

import subprocess
import uuid

import pytest
import sqlalchemy as sa
import torch
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.postgres
# trust auth on the test server: any password is accepted, and must be hidden; the second is not
# percent-encoded and holds a slash, a space and a quote (SQLAlchemy itself needs an @ encoded)
SECRETS = ["PASSWORD-f16-x9", "PASS/W0RD f16'x9"]


@pytest.fixture
def pg_db(pg_server):
    name = f"t_{uuid.uuid4().hex[:12]}"
    pg_server.admin(f"CREATE DATABASE {name}")
    yield name
    pg_server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def world_model(tmp_path_factory):
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    torch.set_num_threads(1)
    cfg = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
                          intermediate_size=64, vocab_size=400, seed=0)
    return init_tiny_model(world_corpus(60, seed=0), tmp_path_factory.mktemp("tiny") / "model", cfg)


def _grep(pattern: str, *paths) -> str:
    res = subprocess.run(["grep", "-r", "-a", "-l", "-F", pattern, *map(str, paths)], capture_output=True, text=True)
    assert res.returncode in (0, 1), res.stderr  # 1 = no match
    return res.stdout


@pytest.mark.parametrize("secret", SECRETS)
def test_training_with_a_postgres_password_stores_it_nowhere(pg_server, pg_db, world_model, tmp_path, capfd, secret):
    from envace.trainers.config import TrainConfig
    from envace.trainers.embedded import train

    url = f"postgresql+psycopg://postgres:{secret}@127.0.0.1:{pg_server.port}/{pg_db}"
    masked = f"postgresql+psycopg://postgres:***@127.0.0.1:{pg_server.port}/{pg_db}"
    run_dir, mlflow_dir = tmp_path / "run", tmp_path / "mlflow"
    cfg = TrainConfig.model_validate({
        "model": str(world_model), "out_dir": str(run_dir), "steps": 2, "save_every": 1, "prompts_per_step": 1,
        "k": 2, "threads": 1, "progress": False, "data": {"n_tasks": 10},
        "rollout": {"max_assistant_turns": 1, "act": {"max_new_tokens": 8}, "rehearse": {"max_new_tokens": 8}},
        "tracking": {"store_url": url, "mlflow_uri": f"sqlite:///{mlflow_dir / 'mlflow.db'}"}})
    res = train(cfg)
    assert res.last_step == 2

    # the process used the real URL: the trajectories are in PostgreSQL
    engine = sa.create_engine(url)
    with engine.connect() as c:
        n_traj = c.execute(sa.text("SELECT count(*) FROM trajectories")).scalar()
        [(config, status)] = c.execute(sa.text("SELECT config, status FROM runs")).fetchall()
    engine.dispose()
    assert n_traj == 4 and status == "finished"
    assert config["tracking"]["store_url"] == masked

    dump = tmp_path / "store.sql"
    subprocess.run([str(pg_server.bindir / "pg_dump"), "-h", "127.0.0.1", "-p", str(pg_server.port), "-U", "postgres",
                    "-f", str(dump), pg_db], check=True, capture_output=True)
    assert "trajectories" in dump.read_text() and masked in dump.read_text()
    assert (run_dir / "config.yaml").is_file() and list(run_dir.glob("checkpoints/step_*/meta.json"))
    assert list(mlflow_dir.rglob("config.yaml"))  # the MLflow config artifact exists (and is searched)

    assert _grep(secret, run_dir, mlflow_dir, dump) == ""
    assert masked in (run_dir / "config.yaml").read_text()
    run = MlflowClient(f"sqlite:///{mlflow_dir / 'mlflow.db'}").get_run(res.mlflow_run_id)
    assert run.data.params["tracking.store_url"] == masked
    out, err = capfd.readouterr()
    assert secret not in out + err  # logs and warnings printed during the run
