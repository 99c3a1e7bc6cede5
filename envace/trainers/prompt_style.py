"""Guard against a Rehearse prompt the policy never saw: RL from an SFT checkpoint trained on another style.

`envace sft` writes its resolved config (with `rehearse_style`) beside the checkpoint's `model/` directory.
When rehearse-mode RL starts from that model with a different `rollout.rehearse_style`, the Rehearse role
is asked for its output in a prompt layout it was not trained on. Measured here (the tiny model, SFT on
`compact`, RL with the `history` default): 42 % of the first step's Rehearse outputs failed to parse (vs
2 % with matching styles) and training reward started at 0.25 instead of 0.64. The trainer warns (an
ablation may want the mismatch on purpose); it does not refuse.
"""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

log = logging.getLogger(__name__)


def sft_rehearse_style(model_dir: str | Path) -> str | None:
    """The Rehearse prompt style an `envace sft` run trained `model_dir` with (its `config.yaml` one level
    up), or None when the model was not made by `envace sft` or the file does not say."""
    path = Path(model_dir).parent / "config.yaml"
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    style = data.get("rehearse_style") if isinstance(data, dict) else None
    return style if isinstance(style, str) else None


def style_mismatch(model_dir: str | Path, rollout_style: str) -> str | None:
    """A warning naming both styles and the fix when they differ, else None."""
    trained = sft_rehearse_style(model_dir)
    if trained is None or trained == rollout_style:
        return None
    return (f"{model_dir}: its SFT trained Rehearse on rehearse_style={trained!r}, but this run prompts Rehearse "
            f"with rollout.rehearse_style={rollout_style!r}; the Rehearse role will see a prompt layout it was "
            f"not trained on (many unparseable results). Set rollout.rehearse_style={trained} or re-run SFT "
            f"with rehearse_style={rollout_style}.")


def warn_on_style_mismatch(model_dir: str | Path, rollout_style: str) -> str | None:
    message = style_mismatch(model_dir, rollout_style)
    if message:
        log.warning(message)
    return message
