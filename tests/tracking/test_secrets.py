"""envace.secrets: hand-worked masking examples (URL passwords, secret query values, secret keys), what is
left alone, and the logging filter."""

from __future__ import annotations

import logging

import pytest

from envace.secrets import MaskingFilter, api_key_from_env, has_secret, mask_secrets, mask_text


@pytest.mark.parametrize(("text", "masked"), [
    ("postgresql://user:PASSWORD@db.example:5432/envace", "postgresql://user:***@db.example:5432/envace"),
    ("postgresql+psycopg://u:p%40ss@h/db", "postgresql+psycopg://u:***@h/db"),
    ("mysql://root:x@localhost/db and https://a:b@c/d", "mysql://root:***@localhost/db and https://a:***@c/d"),
    ("https://mlflow.example/api?run=1&token=abc123&x=2", "https://mlflow.example/api?run=1&token=***&x=2"),
    ("https://h/?api_key=k1;password=k2", "https://h/?api_key=***;password=***"),
    ("error: cannot connect to 'postgresql://e:S3cr3t@h/db'", "error: cannot connect to 'postgresql://e:***@h/db'"),
])
def test_masks_credentials_in_text(text, masked):
    assert mask_text(text) == masked and has_secret(text)
    assert mask_text(masked) == masked  # idempotent


@pytest.mark.parametrize("text", [
    "sqlite:////tmp/runs/mlflow.db", "http://127.0.0.1:8000/v1", "postgresql://user@host/db",
    "http://host:8000/v1/users/a@b.c", "ssh://git@github.com/org/repo", "step=3 reward=0.5", "databricks",
])
def test_leaves_urls_without_credentials_alone(text):
    assert mask_text(text) == text and not has_secret(text)


def test_masks_nested_configs_and_secret_keys_but_keeps_env_var_names():
    cfg = {"tracking": {"store_url": "postgresql://u:pw@h/db", "mlflow_uri": None},
           "judge": {"api_key": "sk-1", "api_key_env": "JUDGE_KEY", "token": ""},
           "list": ["mysql://a:b@c/d", 3, ("https://x:y@z",)], "password": "hunter2", "steps": 10}
    assert mask_secrets(cfg) == {
        "tracking": {"store_url": "postgresql://u:***@h/db", "mlflow_uri": None},
        "judge": {"api_key": "***", "api_key_env": "JUDGE_KEY", "token": ""},
        "list": ["mysql://a:***@c/d", 3, ("https://x:***@z",)], "password": "***", "steps": 10}
    assert cfg["tracking"]["store_url"] == "postgresql://u:pw@h/db"  # a copy: the live config keeps the URL


def test_api_key_from_env(monkeypatch):
    monkeypatch.setenv("T_KEY", "k")
    assert api_key_from_env("T_KEY") == "k" and api_key_from_env(None) is None
    monkeypatch.delenv("T_KEY")
    with pytest.raises(RuntimeError, match="T_KEY"):
        api_key_from_env("T_KEY")


def test_logging_filter_masks_formatted_records(caplog):
    logger = logging.getLogger("envace.test.secrets")
    caplog.handler.addFilter(MaskingFilter())
    with caplog.at_level(logging.INFO, logger="envace.test.secrets"):
        logger.info("store %s ready", "postgresql://u:PASSWORD@h/db")
    assert caplog.messages == ["store postgresql://u:***@h/db ready"]


def test_record_masking_covers_every_logger_and_handler():
    import io
    import logging

    from envace.secrets import install_record_masking

    before = logging.getLogRecordFactory()
    stream = io.StringIO()
    log = logging.getLogger("some.library.with.its.own.handler")
    handler = logging.StreamHandler(stream)
    log.addHandler(handler)
    try:
        logging.setLogRecordFactory(logging.LogRecord)  # an in-process CLI test in this worker may have installed it
        log.warning("connecting to %s", "postgresql://u:PASSWORD@h/db")
        assert "PASSWORD" in stream.getvalue()  # control: without masking the password is written
        install_record_masking()
        install_record_masking()  # idempotent
        log.warning("connecting to %s", "postgresql://u:PASSWORD@h/db")
        last = stream.getvalue().splitlines()[-1]
        assert last == "connecting to postgresql://u:***@h/db"
    finally:
        log.removeHandler(handler)
        logging.setLogRecordFactory(before)
