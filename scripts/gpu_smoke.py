"""GPU smoke checks behind scripts/gpu_smoke.sh (run that, not this).

`parity WORKDIR MODEL_DIR [DEVICE]`: rows of both roles sampled on CPU from MODEL_DIR (Act at 1.0, Rehearse at 0.01),
then the embedded trainer's log-probs (`packed_logprobs`) of the same tokens on CPU and on DEVICE (default
cuda; the CPU test passes cpu to run the code path), and the role-wise GRPO advantages of the same
rewards on both devices. Prints one line per check and exits 1
when a check fails. Tolerances: float32 on both devices; CUDA's matmuls may use TF32, which the check
turns off, so the remaining difference is reduction order (~1e-5 at T=1, x100 at T=0.01).
`verl-config WORKDIR MODEL_DIR PARQUET`: writes the 2-step VerlLaunchConfig YAML of the tiny model on
one GPU and prints its path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def parity(workdir: str, model_dir: str, device: str = "cuda") -> int:
    import torch

    from envace.algos import role_grpo_advantages
    from envace.engines.base import GenRequest
    from envace.engines.hf import HFEngine
    from envace.models.loading import load_policy
    from envace.trainers.packed_readout import packed_logprobs
    from envace.trainers.packing import pack_rows
    from envace.types import Role

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model, tok = load_policy(model_dir, device="cpu", dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    reqs, roles = [], []
    for i in range(8):
        role, t = (Role.ACT, 1.0) if i % 2 == 0 else (Role.REHEARSE, 0.01)
        reqs.append(GenRequest(torch.randint(5, len(tok) - 1, (12 + i,), generator=gen).tolist(), temperature=t,
                               max_new_tokens=8, seed=i))
        roles.append(role)
    results = HFEngine(model, tok).generate(reqs)

    class Row:  # the fields packing reads
        def __init__(self, i, req, res, role):
            self.role, self.prompt_ids, self.response_ids = role, list(req.prompt_ids), list(res.token_ids)
            self.old_logprobs, self.temperature = list(res.logprobs), req.temperature
            self.prompt_index, self.trajectory_key = i // 4, i

    rows = [Row(i, q, r, role) for i, (q, r, role) in enumerate(zip(reqs, results, roles))]
    rows = [r for r in rows if r.response_ids]

    def logprobs(m):
        with torch.no_grad():
            out = packed_logprobs(m, pack_rows(rows), rows, tok.pad_token_id)
        return {r: out.logprobs[i, : len(rows[r].response_ids)].cpu() for i, r in enumerate(out.rows)}

    failed = 0
    name = device.upper()
    try:
        cpu = logprobs(model)
        other = logprobs(model.to(device))
        for t in (1.0, 0.01):
            idx = [i for i, r in enumerate(rows) if r.temperature == t]
            diff = max(float((cpu[i] - other[i]).abs().max()) for i in idx)
            tol = 1e-3 if t == 1.0 else 1e-1
            ok = diff <= tol
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} log-prob parity CPU vs {name} at T={t}: max |diff| = {diff:.2e} "
                  f"(tolerance {tol:g}, {len(idx)} rows)")
    except Exception as exc:  # noqa: BLE001 - a smoke test reports and goes on
        failed += 1
        print(f"FAIL log-prob parity CPU vs {name}: {type(exc).__name__}: {exc}")
    try:
        rewards = torch.rand(len(rows), generator=gen)
        args = ([r.prompt_index for r in rows], [r.trajectory_key for r in rows], [r.role for r in rows])
        a_cpu = role_grpo_advantages(rewards, *args)
        a_other = role_grpo_advantages(rewards.to(device), *args).cpu()
        diff = float((a_cpu - a_other).abs().max())
        ok = diff <= 1e-6
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} advantage parity CPU vs {name} (role-wise GRPO): max |diff| = {diff:.2e}")
    except Exception as exc:  # noqa: BLE001
        failed += 1
        print(f"FAIL advantage parity CPU vs {name}: {type(exc).__name__}: {exc}")
    Path(workdir, "parity.json").write_text(json.dumps({"failed": failed}))
    return 1 if failed else 0


def verl_config(workdir: str, model_dir: str, parquet: str) -> int:
    import importlib.util

    import yaml

    overrides = ["trainer.val_before_train=false", "actor_rollout_ref.rollout.enforce_eager=true"]
    # the launcher's default is sdpa without remove-padding; flash-attention only where it is installed
    attn = "flash_attention_2" if importlib.util.find_spec("flash_attn") is not None else "sdpa"
    cfg = {
        "model": model_dir, "train_files": [str(Path(parquet).resolve())], "rollout": "vllm", "n": 2,
        "train_batch_size": 2, "attn_implementation": attn, "max_prompt_length": 768, "rollout_prompt_length": 768,
        "max_response_length": 64, "max_model_len": 1024, "max_tokens_per_gpu": 1024,
        "gpu_memory_utilization": 0.3, "nnodes": 1, "n_gpus_per_node": 1, "total_training_steps": 2,
        "save_freq": -1, "test_freq": -1, "loggers": ["console"], "experiment": "gpu_smoke",
        "checkpoint_dir": str(Path(workdir, "verl_ckpt").resolve()), "python": sys.executable,
        "loop": {"act": {"temperature": 1.0, "max_tokens": 48}, "rehearse": {"temperature": 0.01, "max_tokens": 48},
                 "max_assistant_turns": 2, "threads": 8},
        "overrides": overrides,
    }
    path = Path(workdir, "verl_smoke.yaml")
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    print(path)
    return 0


if __name__ == "__main__":
    cmd, *rest = sys.argv[1:]
    sys.exit({"parity": parity, "verl-config": verl_config}[cmd](*rest))
