"""What makes a path a loadable local model directory (config.json, weights, a tokenizer), checked without
importing torch or transformers, so a wrong path is reported at once; `ModelDirError` names the path and the fix."""

from __future__ import annotations

from pathlib import Path

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


class ModelDirError(ValueError):
    """The path is not a loadable local model directory; the message names the path and the fix.
    `path`, `what` and `fix` hold the parts on their own (for one-line CLI errors)."""

    def __init__(self, path: str | Path, what: str, fix: str) -> None:
        super().__init__(f"{what}; {fix}")
        self.path, self.what, self.fix = str(path), what, fix


MAKE_MODEL = ("build one with `envace model init --out DIR`, import SmolLM2 with `envace model import-smollm2 "
              "--out DIR`, or pass model=<a saved Hugging Face model dir>")


def check_model_dir(path: str | Path) -> Path:
    """Raise ModelDirError unless `path` holds config.json, weights and a tokenizer."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ModelDirError(p, f"model path {p} is not a directory", MAKE_MODEL)
    if not (p / "config.json").is_file():
        raise ModelDirError(p, f"model dir {p} has no config.json, so it is not a Hugging Face model dir",
                            MAKE_MODEL)
    if not any((p / f).is_file() for f in WEIGHT_FILES):
        raise ModelDirError(p, f"model dir {p} has config.json but no weights (looked for {', '.join(WEIGHT_FILES)})",
                            MAKE_MODEL)
    if not ((p / "tokenizer.json").is_file() or (p / "tokenizer_config.json").is_file()):
        raise ModelDirError(p, f"model dir {p} has no tokenizer files (tokenizer.json)", MAKE_MODEL)
    return p
