"""The verl_memory stage of scripts/gpu_evidence.sh: peak GPU memory of verl 0.9.1's own FSDP actor (the
`ActorRolloutRefWorker` verl's V1 trainer runs, its `FSDPEngineWithLMHead`) on one GPU, for the old
log-probs and one update of a synthetic EnvACE row mix, with and without envace's padding bound, next to
envace's memory estimate (envace.trainers.verl.memory) for the same config and mix.

The model is Qwen3-8B-shaped (hidden 4096, 32 heads, 8 KV heads, head_dim 128, intermediate 12288, the full
151,936 vocabulary, untied head) with 2 decoder layers, random bf16 weights built from a transformers
`Qwen3Config` (no download). The verl config is the paper config's (configs/verl/qwen3_8b_cm2.yaml) through
envace's own launcher (`build_overrides`, then verl's Hydra config): sdpa, no remove-padding, gradient
checkpointing, optimizer offload, the fp32 temperature division (envace.trainers.verl.temperature), Act rows
at T 1.0 and the Rehearse row at 0.01 (a per-row temperature tensor, as envace's trainer sends it); one node
of one GPU. The rows (`MIX`: a late Act turn, a Rehearse call, two early turns) are one GPU's share of a step.
Cases:
- `rows` (envace's launch, `micro_batching: rows`): one row per log-prob / update micro-batch, the padding
  bound; the worst micro-batch is the longest row.
- `token_cap` (without it: verl's dynamic batch size, `actor.use_dynamic_bsz=true` under the same 20,000-token
  cap): all four rows in one micro-batch, each padded to the longest, 4 x 15,000 tokens.

How it runs: every step in its own subprocess with its own time limit (scripts/gpu_evidence_verl_case.py):
`prepare` writes the model, then one process per case; an out-of-memory error is a recorded outcome of its
phase, not a failure. Outside a Ray cluster: torch.distributed with one process (verl's own init, nccl; gloo in
the dry run), and `ray` is an import-only module the stage writes (verl imports Ray at module level; the GPU
machine has none and nothing here calls it). Everything but the summary and the stage's log lives in a
temporary folder that is removed afterwards. `--dry-run`: the same code on CPU with a toy shape and mix and
a CPU platform for verl (scripts/gpu_evidence_cpu_platform.py); it measures no memory.

The estimate counts the log-prob / update tensors above the FSDP shards; the measured peak is
`torch.cuda.max_memory_allocated` during the phase, so `above_start_gb` (peak minus what was allocated when
the phase began) is the number to hold against it; the update's also holds the fp32 gradients (as many bytes
as `model.fp32_params_gb`) and the optimizer step. Each case also records the micro-batches verl formed
(rows x padded tokens), to hold against the estimate's worst micro-batch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CASE_SCRIPT = Path(__file__).with_name("gpu_evidence_verl_case.py")
PAPER_CONFIG = ROOT / "configs" / "verl" / "qwen3_8b_cm2.yaml"
GB = 1e9  # the estimator's unit (decimal gigabytes)

SHAPE = dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128, intermediate_size=12288,
             vocab_size=151_936, num_hidden_layers=2, max_position_embeddings=40_960)
DRY_SHAPE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
                 vocab_size=512, num_hidden_layers=2, max_position_embeddings=256)
MIX = [15_000, 3_000, 1_000, 1_000]  # tokens per row: a late Act turn, a Rehearse call, two early Act turns
DRY_MIX = [60, 12, 4, 4]
ACT_T, REHEARSE_T = 1.0, 0.01  # the paper's role temperatures
REHEARSE_ROW = 1
CASES = {  # case -> raw verl overrides on top of envace's launch
    "rows": [],
    "token_cap": ["actor_rollout_ref.actor.use_dynamic_bsz=true"],
}
# the dry run's one departure from the launch: FSDP2 (verl's default FSDP1 syncs module states on a GPU only)
DRY_OVERRIDES = ["actor_rollout_ref.actor.strategy=fsdp2"]
CASE_NOTES = {
    "rows": "envace's launch: micro_batching=rows, one row per log-prob / update micro-batch (the padding bound)",
    "token_cap": "without the bound: verl's dynamic batch size (use_dynamic_bsz) under the max_model_len token cap, "
                 "rows padded to the micro-batch's longest",
}
# seconds per subprocess (the stage itself has 180 s in gpu_evidence.sh)
LIMITS = {"prepare": 40, "case": 68}
DRY_LIMITS = {"prepare": 40, "case": 60}

RAY_STUB = '''"""Import-only ray for the verl_memory stage (written by scripts/gpu_evidence_verl.py): verl imports ray
at module level; nothing in the stage runs Ray, and any call of it raises."""
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+import-only"
__path__ = []


class _Missing:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(self._name + "." + attr)

    def __call__(self, *args, **kwargs):
        raise RuntimeError(self._name + "() called: ray is an import-only stand-in in the verl_memory stage")

    def __getitem__(self, key):
        return self

    def __mro_entries__(self, bases):
        return (object,)


def remote(*args, **kwargs):
    if len(args) == 1 and not kwargs and callable(args[0]):
        return args[0]
    return lambda obj: obj


def __getattr__(attr):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return _Missing("ray." + attr)


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.startswith("ray."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []

        def missing(attr, _name=spec.name):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Missing(_name + "." + attr)

        module.__getattr__ = missing
        return module

    def exec_module(self, module):
        return None


sys.meta_path.insert(0, _Submodules())
'''


def shape(dry: bool) -> dict[str, int]:
    return dict(DRY_SHAPE if dry else SHAPE)


def mix(dry: bool) -> list[int]:
    return list(DRY_MIX if dry else MIX)


def temperatures(dry: bool) -> list[float]:
    return [REHEARSE_T if i == REHEARSE_ROW else ACT_T for i in range(len(mix(dry)))]


def launch_config(model_dir: str | Path, case: str, dry: bool) -> Any:
    """The paper config through envace's launch config, on one GPU, with the stage's model, mix and role
    temperatures; `case`'s raw verl overrides appended (they win, as a config's `overrides` do)."""
    from envace.config import load_config
    from envace.trainers.verl.config import VerlLaunchConfig

    s = shape(dry)
    values: dict[str, Any] = dict(
        model=str(model_dir), nnodes=1, n_gpus_per_node=1,
        loop={"act": {"temperature": ACT_T}, "rehearse": {"temperature": REHEARSE_T}},
        memory={"vocab": s["vocab_size"], "hidden": s["hidden_size"], "layers": s["num_hidden_layers"],
                "rows": mix(dry)})
    if dry:  # lengths scaled to the toy mix (the config's checks need prompt < context)
        values.update(max_model_len=sum(DRY_MIX), rollout_prompt_length=64, max_prompt_length=32,
                      max_response_length=16)
    cfg = load_config(VerlLaunchConfig, PAPER_CONFIG, **values)
    return cfg.model_copy(update={"overrides": [*cfg.overrides, *CASES[case], *(DRY_OVERRIDES if dry else [])]})


def estimates(cfg: Any, case: str) -> dict[str, Any]:
    """envace's estimate (GB) of the old log-probs and the update for `cfg` on its memory.rows mix."""
    from envace.trainers.verl.memory import (
        ModelShape,
        estimate_paths,
        launch_estimates,
        launch_temperatures,
        needs_fp32_copy,
        worst_micro_batch,
    )

    if case == "rows":  # envace's launch: the estimator reads the config as the launcher's dry run does
        paths = launch_estimates(cfg)
    else:  # the launch config refuses token micro-batches with sdpa, so the estimator's functions directly
        mb = worst_micro_batch(cfg.memory.rows, packed=False, token_cap=cfg.token_cap())
        paths = estimate_paths(mb, ModelShape(cfg.memory.vocab, cfg.memory.hidden, cfg.memory.layers),
                               fp32_copy=needs_fp32_copy(launch_temperatures(cfg)))
    by_name = {p.path: p for p in paths}
    out = {}
    for name in ("old log-probs", "update"):
        p = by_name[name]
        mb = p.micro_batch
        out[name] = {"gb": round(p.total / GB, 3), "bytes": int(p.total), "line": p.line(),
                     "micro_batch": {"rows": mb.rows, "longest": mb.longest, "padded_tokens": mb.padded}}
    return out


def _run(args: list[str], limit: float, env: dict[str, str]) -> tuple[str, str]:
    """Run one subprocess step, its output into this stage's log; ('ok' | 'timeout' | 'exit N', tail)."""
    cmd = [sys.executable, str(CASE_SCRIPT), *args]
    print(f"--- {' '.join(args[:2])} (limit {limit:.0f} s)", flush=True)
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit)
        out, state = proc.stdout + proc.stderr, "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
    except subprocess.TimeoutExpired as exc:
        out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                      for x in (exc.stdout, exc.stderr))
        state = "timeout"
    print(out, flush=True)
    return state, out[-1500:]


def verl_memory(dry: bool, work: Path) -> dict[str, Any]:
    limits = DRY_LIMITS if dry else LIMITS
    tmp = Path(tempfile.mkdtemp(prefix="envace_verl_memory_"))
    try:
        stub = tmp / "stub" / "ray"
        stub.mkdir(parents=True)
        (stub / "__init__.py").write_text(RAY_STUB)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stub.parent), str(ROOT),
                                                            os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
        dry_flag = ["--dry-run"] if dry else []
        model = tmp / "model"
        state, tail = _run(["prepare", str(model), "--out", str(tmp / "prepare.json"), *dry_flag],
                           limits["prepare"], env)
        if state != "ok":
            return {"status": "fail", "error": f"model preparation: {state}", "tail": tail}
        prepared = json.loads((tmp / "prepare.json").read_text())
        out: dict[str, Any] = {"model": prepared, "mix_tokens": mix(dry), "temperatures": temperatures(dry),
                               "unit": "GB = 1e9 bytes (the estimator's unit)", "cases": {}}
        failed = []
        for case in CASES:
            cfg = launch_config(model, case, dry)
            result_file = tmp / f"{case}.json"
            state, tail = _run(["case", str(model), "--case", case, "--out", str(result_file), *dry_flag],
                               limits["case"], env)
            entry: dict[str, Any] = {"setting": CASE_NOTES[case], "estimate": estimates(cfg, case)}
            if state == "ok" and result_file.is_file():
                entry.update(json.loads(result_file.read_text()))
                errors = [p for p, r in entry["phases"].items() if r["outcome"] not in ("ok", "oom")]
                if errors:
                    failed.append(f"{case}: {', '.join(errors)} failed (not out of memory), see the log")
            else:
                entry.update(outcome=state, tail=tail)
                failed.append(f"{case}: {state}")
            out["cases"][case] = entry
            for phase in ("old log-probs", "update"):
                got = entry.get("phases", {}).get(phase, {})
                print(f"{case}: {phase}: {got.get('outcome', state)}, peak {got.get('peak_gb')} GB "
                      f"({got.get('above_start_gb')} above the phase's start) vs estimate "
                      f"{entry['estimate'][phase]['gb']} GB", flush=True)
        out["status"] = "fail" if failed else "ok"
        if failed:
            out["error"] = "; ".join(failed)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
