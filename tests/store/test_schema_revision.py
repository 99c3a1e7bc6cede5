"""A store written by a newer envace (a schema revision these migrations do not know) is one line with the
store's revision, the code's and the fix, from the library, the writer and the CLI; an older store stays
upgradeable."""

from __future__ import annotations

import subprocess
import sys

import sqlalchemy as sa

from envace.cli_errors import classify
from envace.store.session import StoreSchemaError, check_revision, head_revision, make_engine, upgrade

FUTURE = "0099_from_the_future"


def _stamp(path, revision: str) -> None:
    engine = make_engine(path)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
    engine.dispose()


def test_a_newer_store_is_one_line_with_both_revisions_and_the_fix(tmp_path):
    store = tmp_path / "store.db"
    upgrade(store)
    _stamp(store, FUTURE)
    try:
        upgrade(store)
    except StoreSchemaError as exc:
        msg = str(exc)
    else:
        raise AssertionError("upgrade accepted a store newer than the code")
    assert FUTURE in msg and head_revision() in msg and "newer envace" in msg and "\n" not in msg
    err = classify(StoreSchemaError(msg), "envace train")
    assert "upgrade envace" in err.fix and FUTURE in err.what


def test_store_upgrade_cli_on_a_newer_store_exits_with_the_one_line_error(tmp_path):
    store = tmp_path / "store.db"
    upgrade(store)
    _stamp(store, FUTURE)
    res = subprocess.run([sys.executable, "-m", "envace.cli", "store", "upgrade", str(store)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert len(out.strip().splitlines()) == 1, out
    assert FUTURE in out and head_revision() in out and "Traceback" not in out and "CommandError" not in out


def test_an_older_store_is_known_and_upgrades(tmp_path):
    store = tmp_path / "store.db"
    upgrade(store, "0002_tts")
    assert check_revision(store) == "0002_tts"
    try:
        check_revision(store, allow_older=False)
    except StoreSchemaError as exc:
        assert f"envace store upgrade {store}" in str(exc)
    else:
        raise AssertionError("an old store passed a read-only revision check")
    upgrade(store)
    assert check_revision(store, allow_older=False) == head_revision()
