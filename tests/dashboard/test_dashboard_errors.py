"""Bad input to the dashboard is a message on the page, never a Python traceback with server paths:
an out-of-range `?traj=` id and a trajectory store URL that cannot be opened (AppTest, real SQLite store
seeded by conftest.py; the PostgreSQL URL points at a port nothing listens on)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from envace.dashboard_launch import app_path

pytestmark = pytest.mark.dashboard
TIMEOUT = 120


def shown(at: AppTest) -> list[str]:
    return [str(e.value) for kind in ("markdown", "caption", "error", "warning", "info", "subheader", "title")
            for e in getattr(at, kind)]


@pytest.mark.parametrize("bad", ["12345678901234567890", "99999999999999999999999", "0", "-3", "１２"])
def test_out_of_range_traj_link_is_a_warning(dash_env, bad):
    at = AppTest.from_file(str(app_path()), default_timeout=TIMEOUT)
    at.query_params["run"] = "run-a"
    at.query_params["traj"] = bad
    at.run()
    at.switch_page("views/trajectories.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(f"?traj={bad} is not a trajectory id" in w.value for w in at.warning)
    first = at.number_input(key="open_id").value  # the first trajectory of the page is opened instead
    assert at.subheader[0].value == f"Trajectory #{first}"


def test_unreachable_postgres_store_is_one_message(monkeypatch, seeded):
    monkeypatch.setenv("ENVACE_DASHBOARD_STORE", "postgresql://user:PASSWORD@127.0.0.1:1/envace")
    monkeypatch.setenv("ENVACE_DASHBOARD_MLFLOW_URI", seeded.mlflow_uri)
    for page in (None, "views/trajectories.py"):
        at = AppTest.from_file(str(app_path()), default_timeout=TIMEOUT).run()
        if page:
            at.switch_page(page).run()
        assert not at.exception, [e.value for e in at.exception]
        (err,) = at.error
        assert err.value.startswith("Cannot open the trajectory store postgresql://user:***@127.0.0.1:1/envace: "
                                    "OperationalError")
        text = "\n".join(shown(at))
        assert "PASSWORD" not in text and "Traceback" not in text and ".py" not in text


@pytest.mark.parametrize("bad", ["[text](https://evil.example)", "<a href='https://evil.example'>x</a>",
                                 "![i](https://evil.example/x.png)", "**bold** `code`"])
def test_traj_link_with_markdown_is_shown_as_plain_text(dash_env, bad):
    from markdown_it import MarkdownIt

    at = AppTest.from_file(str(app_path()), default_timeout=TIMEOUT)
    at.query_params["run"] = "run-a"
    at.query_params["traj"] = bad
    at.run()
    at.switch_page("views/trajectories.py").run()
    assert not at.exception, [e.value for e in at.exception]
    (warning,) = [w.value for w in at.warning if "is not a trajectory id" in w.value]
    html = MarkdownIt("commonmark").render(warning)  # how the markdown element renders it
    assert "<a " not in html and "<img" not in html and "<strong>" not in html and "<code>" not in html
    assert bad[:40] in MarkdownIt("commonmark").render(warning).replace("&quot;", '"').replace("&lt;", "<") \
        .replace("&gt;", ">").replace("&amp;", "&").replace("&#x27;", "'")


def test_old_schema_store_says_run_store_upgrade(monkeypatch, seeded, tmp_path):
    from envace.store.session import head_revision, upgrade

    old = tmp_path / "old.db"
    upgrade(old, "0002_tts")
    monkeypatch.setenv("ENVACE_DASHBOARD_STORE", str(old))
    monkeypatch.setenv("ENVACE_DASHBOARD_MLFLOW_URI", seeded.mlflow_uri)
    at = AppTest.from_file(str(app_path()), default_timeout=TIMEOUT).run()
    at.switch_page("views/trajectories.py").run()
    assert not at.exception, [e.value for e in at.exception]
    (err,) = at.error
    assert "schema revision 0002_tts" in err.value and head_revision() in err.value
    assert f"run `envace store upgrade {old}`" in err.value
    assert "Traceback" not in "\n".join(shown(at))
