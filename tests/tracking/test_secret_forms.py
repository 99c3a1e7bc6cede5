"""Every form a credential takes in a URL or DSN is masked in every place a config is written: the run's
`config.yaml`, a checkpoint's `meta.json`, MLflow params and the MLflow `config.yaml` artifact (searched in
the MLflow database and artifact files), and the trajectory store's `runs.config` (searched in the SQLite
file). Each form's secret is a unique string, so a byte search over those files finds any copy of it."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from envace.secrets import MASK, has_secret, mask_text

# (form, its secret, what must survive masking)
FORMS = [
    ("postgresql://user:Sec/ret01@host/db", "Sec/ret01", "postgresql://user:"),
    ("postgresql://user:Sec\"ret'02@host/db", "Sec\"ret'02", "@host/db"),
    ("postgresql://user:Sec ret03@host/db", "Sec ret03", "@host/db"),
    ("postgresql://user:Sec@ret04@host:5432/db", "Sec@ret04", "@host:5432/db"),
    ("postgresql://user:Sec:ret#05?x@host/db", "Sec:ret#05?x", "user:"),
    ("postgresql://user:Sec%2Fret%4006@host/db", "Sec%2Fret%4006", "@host/db"),
    ("postgresql+psycopg://user:Secret07@[::1]:5432/db", "Secret07", "@[::1]:5432/db"),
    ("redis://:Secret08@host:6379/0", "Secret08", "@host:6379/0"),
    ("mongodb+srv://user:Secr%C3%A9t09@cluster.example.net/?authSource=admin", "Secr%C3%A9t09", "authSource=admin"),
    ("postgresql://user:Secrét10@host/db", "Secrét10", "@host/db"),
    ("https://mlflow.example/api?token=Secret11&x=1", "Secret11", "&x=1"),
    ("jdbc:postgresql://host/db?user=u&password=Secret12", "Secret12", "user=u"),
    ("https://s3.example/b/o?X-Amz-Security-Token=Secret13&X-Amz-Signature=Secret14", "Secret13", "s3.example"),
    ("https://s3.example/b/o?X-Amz-Security-Token=Secret13&X-Amz-Signature=Secret14", "Secret14", "s3.example"),
    ("host=db.example port=5432 user=u password=Secret15 dbname=d", "Secret15", "dbname=d"),
    ("host=db.example user=u password='Sec ret\\'16' dbname=d", "Sec ret\\'16", "dbname=d"),
    ("Driver={PostgreSQL};Server=h;Uid=u;Pwd={Sec;ret17};Database=d", "Sec;ret17", "Database=d"),
    ("Server=h;Database=d;User Id=u;Password=Secret18;", "Secret18", "Database=d"),
    ("mysql+pymysql://user:Secret19@host/db?charset=utf8mb4", "Secret19", "charset=utf8mb4"),
    ("connect with postgresql://user:Secret20@host/db failed for admin@example.com", "Secret20",
     "admin@example.com"),
]
SAFE = ["http://host:8000/v1/users/a@b.c", "postgresql://user@host/db", "sqlite:////tmp/a.db", "ssh://git@github.com/o/r",
        "http://u:***@host/", "step=3 reward=0.5", "https://host/api?authSource=admin&x=1"]


@pytest.mark.parametrize(("form", "secret", "kept"), FORMS)
def test_mask_text_hides_the_secret_and_keeps_the_rest(form, secret, kept):
    masked = mask_text(form)
    assert secret not in masked and MASK in masked and kept in masked
    assert has_secret(form) and mask_text(masked) == masked


@pytest.mark.parametrize("text", SAFE)
def test_text_without_a_credential_is_left_alone(text):
    assert mask_text(text) == text


def _files_with(secret: str, *roots) -> list[str]:
    needle = secret.encode("utf-8")
    hits = []
    for root in roots:
        for f in [root] if root.is_file() else root.rglob("*"):
            if f.is_file() and needle in f.read_bytes():
                hits.append(str(f))
    return hits


def test_every_form_is_masked_in_every_place_a_config_is_written(tmp_path):
    from envace.store.runs import RunInfo, register_run
    from envace.store.session import make_engine, upgrade
    from envace.tracking.mlflow_run import start_run
    from envace.trainers.checkpoint import save_checkpoint
    from envace.trainers.config import TrainConfig

    forms = {f"f{i:02d}": form for i, (form, _, _) in enumerate(FORMS)}
    config = {"tracking": {"store_url": FORMS[0][0]}, "forms": forms, "listed": [f for f, _, _ in FORMS]}
    # config.yaml: the resolved train config, one per form in its real field
    run_dirs = []
    for i, (form, _, _) in enumerate(FORMS):
        cfg = TrainConfig.model_validate({"model": "m", "out_dir": str(tmp_path / f"run{i}"),
                                          "tracking": {"store_url": form}})
        run_dirs.append(cfg.save_resolved(tmp_path / f"run{i}"))
    # meta.json of a checkpoint
    ckpt = save_checkpoint(tmp_path / "ckpt", 1, {}, None, {}, {"config": config})
    # MLflow params + config.yaml artifact
    mlflow_dir = tmp_path / "mlflow"
    with start_run(f"sqlite:///{mlflow_dir / 'mlflow.db'}", "secrets", "forms", config) as run:
        run_id = run.run_id
    params = MlflowClient(f"sqlite:///{mlflow_dir / 'mlflow.db'}").get_run(run_id).data.params
    assert params["forms.f00"] == mask_text(FORMS[0][0])
    assert list(mlflow_dir.rglob("config.yaml"))
    # the trajectory store's runs table
    store = tmp_path / "store.db"
    upgrade(store)
    engine = make_engine(store)
    register_run(engine, RunInfo(id="r1", config=config))
    engine.dispose()

    places = {"config.yaml": run_dirs, "meta.json": [ckpt / "meta.json"], "mlflow": [mlflow_dir],
              "store": [p for p in tmp_path.iterdir() if p.name.startswith("store.db")]}
    leaks = {(form, where): hits for form, secret, _ in FORMS for where, roots in places.items()
             if (hits := _files_with(secret, *roots))}
    assert leaks == {}
