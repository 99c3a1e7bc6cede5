"""A model dir's config.json is bounded before any tensor is built: dimensions that are not positive
integers, more layers than the layer budget, or dimensions whose weights and rotary table would not fit the
machine's memory are one ModelDirError naming config.json, the field, the limit and the setting. `envace
eval` on such a checkpoint exits with that one line, in bounded memory (measured in a fresh process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envace.input_budget import physical_memory
from envace.models.loading import load_policy
from envace.models.model_dir import ModelDirError, check_model_dir, estimated_bytes

ROOT = Path(__file__).resolve().parents[2]


def _with_config(tiny_dir: Path, tmp_path: Path, **changes) -> Path:
    out = tmp_path / "model"
    shutil.copytree(tiny_dir, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(changes)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def test_the_estimate_counts_a_small_decoder_by_hand():
    # hidden 8, 2 heads x 4, 1 kv head, 16 intermediate, vocab 10 (untied), 1 layer, 5 positions:
    # per layer q+o 2*8*2*4=128, k+v 2*8*1*4=64, mlp 3*8*16=384, norms 2*8+2*4=24 -> 600; embeddings 2*10*8=160;
    # final norm 8 -> 768 params * 4 bytes; rotary 12 * 5 * 4 = 240
    cfg = {"hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
           "intermediate_size": 16, "vocab_size": 10, "num_hidden_layers": 1, "max_position_embeddings": 5}
    assert estimated_bytes(cfg) == 768 * 4 + 240
    assert estimated_bytes({**cfg, "dtype": "bfloat16"}) == 768 * 2 + 240


@pytest.mark.parametrize(("change", "says"), [
    ({"max_position_embeddings": 6e8}, "max_position_embeddings is 600000000.0, not a positive integer"),
    ({"max_position_embeddings": 600_000_000}, "its dimensions need about"),
    ({"num_hidden_layers": 1_000_000}, "num_hidden_layers is 1000000 layers, over the limit of 1024"),
    ({"hidden_size": 10**7}, "its dimensions need about"),
    ({"vocab_size": -3}, "vocab_size is -3, not a positive integer"),
    ({"num_attention_heads": True}, "num_attention_heads is True, not a positive integer"),
])
def test_a_hostile_config_is_refused_before_any_tensor_is_built(tiny_dir, tmp_path, change, says):
    model = _with_config(tiny_dir, tmp_path, **change)
    with pytest.raises(ModelDirError) as err:
        load_policy(model, device="cpu")
    msg = str(err.value)
    assert err.value.path == str(model / "config.json") and says in msg and "\n" not in msg, msg
    if "need about" in says:
        assert f"over the limit of {physical_memory()}" in msg and "ENVACE_MAX_MODEL_BYTES" in msg
    if "layers" in says:
        assert "ENVACE_MAX_MODEL_LAYERS" in msg


def test_the_limits_are_settings(tiny_dir, monkeypatch):
    check_model_dir(tiny_dir)  # the real tiny model is within every default
    monkeypatch.setenv("ENVACE_MAX_MODEL_LAYERS", "1")
    with pytest.raises(ModelDirError, match="num_hidden_layers is 2 layers, over the limit of 1"):
        check_model_dir(tiny_dir)
    monkeypatch.delenv("ENVACE_MAX_MODEL_LAYERS")
    monkeypatch.setenv("ENVACE_MAX_MODEL_BYTES", "1000")
    with pytest.raises(ModelDirError, match="over the limit of 1000;"):
        check_model_dir(tiny_dir)


EVAL = """
import json, resource, subprocess, sys
out = subprocess.run([sys.executable, "-m", "envace.cli", "eval", sys.argv[1], "-k", "1", "data.n_tasks=1",
                      "out_dir=" + sys.argv[2]], capture_output=True, text=True)
print(json.dumps({"rc": out.returncode, "stderr": out.stderr,
                  "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def test_envace_eval_on_a_checkpoint_with_a_huge_context_is_one_line_in_bounded_memory(tiny_dir, tmp_path):
    model = _with_config(tiny_dir, tmp_path, max_position_embeddings=600_000_000)
    res = subprocess.run([sys.executable, "-c", EVAL, str(model), str(tmp_path / "eval")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    out = json.loads(res.stdout.strip().splitlines()[-1])
    lines = out["stderr"].strip().splitlines()
    assert out["rc"] == 2 and len(lines) == 1, out["stderr"][-2000:]
    assert "its dimensions need about" in lines[0] and "config.json" in lines[0], lines[0]
    assert out["peak_mb"] < 1000, out
