"""The trainer's warning when rehearse-mode RL prompts Rehearse in another style than its SFT trained."""

import logging

import yaml

from envace.trainers.prompt_style import sft_rehearse_style, style_mismatch, warn_on_style_mismatch


def _sft_dir(tmp_path, style):
    (tmp_path / "model").mkdir()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"steps": 10, "rehearse_style": style}))
    return tmp_path / "model"


def test_style_read_from_the_sft_config_beside_the_model(tmp_path):
    assert sft_rehearse_style(_sft_dir(tmp_path, "compact")) == "compact"


def test_no_sft_config_or_no_style_is_unknown(tmp_path):
    (tmp_path / "model").mkdir()
    assert sft_rehearse_style(tmp_path / "model") is None
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"rollout": {"rehearse_style": "history"}}))
    assert sft_rehearse_style(tmp_path / "model") is None  # an RL run's config nests it: not an SFT config
    (tmp_path / "config.yaml").write_text("[unbalanced")
    assert sft_rehearse_style(tmp_path / "model") is None


def test_mismatch_names_both_styles_and_the_fix(tmp_path):
    model = _sft_dir(tmp_path, "compact")
    assert style_mismatch(model, "compact") is None
    msg = style_mismatch(model, "history")
    assert "rehearse_style='compact'" in msg and "rollout.rehearse_style='history'" in msg
    assert "rollout.rehearse_style=compact" in msg


def test_warning_is_logged(tmp_path, caplog):
    model = _sft_dir(tmp_path, "history")
    with caplog.at_level(logging.WARNING, logger="envace.trainers.prompt_style"):
        assert warn_on_style_mismatch(model, "compact") is not None
    assert any("not trained on" in r.getMessage() for r in caplog.records)
