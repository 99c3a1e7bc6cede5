"""One subprocess step of the verl_memory stage (scripts/gpu_evidence_verl.py has the why; run the stage, not
this):

    python scripts/gpu_evidence_verl_case.py prepare MODEL_DIR --out JSON [--dry-run]
    python scripts/gpu_evidence_verl_case.py case MODEL_DIR --case rows|token_cap --out JSON [--dry-run]

`prepare`: a random-init bf16 Qwen3 model of the stage's shape and a small tokenizer (envace's BPE, only so
verl's model config loads; the ids are random) saved to MODEL_DIR.
`case`: verl's `ActorRolloutRefWorker` (role `actor`) built from envace's launch overrides composed with
verl's Hydra config, `init_model()`, then the old log-probs (`compute_log_prob`, entropy on, as verl's
V1 trainer asks) and one update (`update_actor`: PPO loss with the KL term, one mini-batch, as envace's
trainer sets it) on the stage's rows, handed over as the TensorDict verl's TransferQueue bridge would hand
the worker (verl's `list_of_dict_to_tensordict` of the fields its V1 agent-loop adapter stores). Per phase:
the outcome (ok / oom), seconds, GPU memory at the start and at the peak, and the micro-batches the model saw
(rows x padded tokens, from a forward pre-hook). The reference model is not built: the update reads
`ref_log_prob` = the old log-probs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_evidence_verl as stage  # noqa: E402

GB = stage.GB


def prepare(model_dir: Path, dry: bool) -> dict[str, Any]:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from envace.models.corpus import world_corpus
    from envace.models.tokenizer import IM_END, PAD_TOKEN, train_tokenizer

    tok = train_tokenizer(world_corpus(20, seed=0), vocab_size=350)
    tok.save_pretrained(model_dir)
    s = stage.shape(dry)
    cfg = Qwen3Config(**s, tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                      pad_token_id=tok.convert_tokens_to_ids(PAD_TOKEN), eos_token_id=tok.convert_tokens_to_ids(IM_END),
                      bos_token_id=None)
    torch.manual_seed(0)
    device = "cpu" if dry else "cuda"
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):  # random init on the GPU: seconds, where the CPU takes minutes at this size
        model = Qwen3ForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    model.save_pretrained(model_dir)
    n = sum(p.numel() for p in model.parameters())
    return {**s, "tie_word_embeddings": False, "dtype": "bfloat16", "params": n,
            "fp32_params_gb": round(4 * n / GB, 3)}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _setup(dry: bool) -> None:
    """One-process torch.distributed as a verl worker sees it (verl's Worker reads these variables)."""
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(_free_port()))
    if dry:
        os.environ["VERL_PLATFORM"] = "cpu"
        import gpu_evidence_cpu_platform
        import torch

        gpu_evidence_cpu_platform.register_engine()
        # verl would ask for "cpu:gloo,cpu:gloo" on a cpu platform, which torch refuses: one gloo group first
        torch.distributed.init_process_group("gloo", rank=0, world_size=1,
                                             init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}")


def build_worker(model_dir: Path, case: str, dry: bool) -> tuple[Any, Any]:
    from omegaconf import open_dict
    from verl.workers.engine_workers import ActorRolloutRefWorker

    import envace.trainers.verl.temperature  # noqa: F401  (installs the fp32 division, as envace's plugin does)
    from envace.trainers.verl.launcher import build_overrides, compose_verl_config

    composed = compose_verl_config(build_overrides(stage.launch_config(model_dir, case, dry), environ={}))
    with open_dict(composed):  # verl's trainer sets this from the run's length before building workers
        composed.actor_rollout_ref.actor.optim.total_training_steps = 1
    worker = ActorRolloutRefWorker(config=composed.actor_rollout_ref, role="actor")
    worker.init_model()
    return worker, composed


def rows(dry: bool, vocab: int) -> list[dict[str, Any]]:
    """The stage's rows as verl's V1 agent-loop adapter stores them (prompt + response ids, masks, positions)
    plus each row's log-prob temperature, as envace's trainer writes it for a batch of mixed temperatures."""
    import torch

    gen = torch.Generator().manual_seed(0)
    out = []
    for n, t in zip(stage.mix(dry), stage.temperatures(dry)):
        response = max(1, n // 8)
        ids = torch.randint(0, vocab, (n,), generator=gen)
        out.append({"prompts": ids[: n - response], "responses": ids[n - response:],
                    "response_mask": torch.ones(response, dtype=torch.int64),
                    "loss_mask": torch.ones(response, dtype=torch.int64), "input_ids": ids,
                    "position_ids": torch.arange(n), "temperature": torch.tensor(t, dtype=torch.float32)})
    return out


def _phase(fn, device: str, seen: list) -> tuple[dict[str, Any], Any]:
    import torch

    seen.clear()
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated() if device == "cuda" else None
    t0 = time.perf_counter()
    result, value = {}, None
    try:
        value = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        result["outcome"] = "ok"
    except torch.OutOfMemoryError as exc:
        result.update(outcome="oom", error=str(exc).splitlines()[0][:300])
    except RuntimeError as exc:  # kernels that fail to allocate raise plain RuntimeErrors (cuBLAS, NCCL)
        text = str(exc)
        oom = "out of memory" in text.lower() or "ALLOC_FAILED" in text
        result.update(outcome="oom" if oom else "error", error=f"{type(exc).__name__}: {text.splitlines()[0][:300]}")
        if not oom:
            traceback.print_exc()
    result["s"] = round(time.perf_counter() - t0, 2)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated()
        result.update(start_gb=round(start / GB, 3), peak_gb=round(peak / GB, 3),
                      above_start_gb=round((peak - start) / GB, 3))
    else:
        result.update(start_gb=None, peak_gb=None, above_start_gb=None)
    result["micro_batches"] = [list(s) for s in seen]
    return result, value


def run_case(model_dir: Path, case: str, dry: bool) -> dict[str, Any]:
    import torch
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import response_from_nested

    device = "cpu" if dry else "cuda"
    worker, composed = build_worker(model_dir, case, dry)
    actor = composed.actor_rollout_ref.actor
    seen: list = []
    worker.actor.engine.module.register_forward_pre_hook(
        lambda mod, args, kwargs: seen.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    base = rows(dry, stage.shape(dry)["vocab_size"])

    def log_probs():
        td = tu.list_of_dict_to_tensordict([dict(r) for r in base])
        # what verl's _compute_old_log_prob puts in extra_info; envace's trainer drops the scalar temperature
        # for a batch of mixed temperatures, so the rows' tensor is read
        tu.assign_non_tensor(td, calculate_entropy=True, compute_loss=False)
        return worker.compute_log_prob(td)

    lp_result, lp_out = _phase(log_probs, device, seen)
    if lp_out is not None:
        old = response_from_nested(lp_out["log_probs"], tu.list_of_dict_to_tensordict(
            [dict(r) for r in base])["response_mask"]).unbind()
    else:  # the log-probs ran out of memory: the update still runs, on stand-in old log-probs
        old = [torch.zeros(len(r["responses"])) for r in base]
    gen = torch.Generator().manual_seed(1)

    def update():
        fields = [{**r, "old_log_probs": o.float(), "ref_log_prob": o.float(),
                   "advantages": torch.randn(len(r["responses"]), generator=gen)} for r, o in zip(base, old)]
        td = tu.list_of_dict_to_tensordict(fields)
        # verl's _update_actor extra_info, with envace's single update: one mini-batch of all rows
        tu.assign_non_tensor(td, calculate_entropy=bool(actor.calculate_entropy or actor.entropy_coeff != 0),
                             distillation_use_topk=False, distillation_only=False, global_batch_size=len(fields),
                             num_mini_batch=1, epochs=int(actor.ppo_epochs), seed=int(actor.data_loader_seed),
                             dataloader_kwargs={"shuffle": bool(actor.shuffle)})
        return worker.update_actor(td)

    up_result, up_out = _phase(update, device, seen)
    if up_out is not None:
        metrics = up_out["metrics"]
        up_result["pg_loss_finite"] = bool(all(torch.isfinite(torch.tensor(v)).all()
                                               for k, v in metrics.items() if k.endswith("pg_loss")))
    from verl.workers.engine.fsdp import transformer_impl

    from envace.trainers.verl.logits import scale_logits_fp32

    gpu = {"gpu": torch.cuda.get_device_name(0),
           "gpu_memory_gb": round(torch.cuda.get_device_properties(0).total_memory / GB, 1)} if device == "cuda" else {}
    return {**gpu, "fp32_temperature_division": transformer_impl._scale_logits_by_temperature is scale_logits_fp32,
            "verl": {
        "use_dynamic_bsz": bool(actor.use_dynamic_bsz), "ppo_max_token_len_per_gpu": actor.ppo_max_token_len_per_gpu,
        "ppo_micro_batch_size_per_gpu": actor.ppo_micro_batch_size_per_gpu,
        "log_prob_micro_batch_size_per_gpu": composed.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu,
        "log_prob_max_token_len_per_gpu": composed.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu,
        "use_remove_padding": bool(composed.actor_rollout_ref.model.use_remove_padding),
        "attn_implementation": str(composed.actor_rollout_ref.model.override_config.attn_implementation),
        "strategy": str(actor.strategy)}, "phases": {"old log-probs": lp_result, "update": up_result}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("step", choices=["prepare", "case"])
    parser.add_argument("model_dir")
    parser.add_argument("--case", choices=list(stage.CASES))
    parser.add_argument("--out", required=True)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    model_dir = Path(args.model_dir)
    if args.step == "prepare":
        result = prepare(model_dir, args.dry_run)
    else:
        _setup(args.dry_run)
        result = run_case(model_dir, args.case, args.dry_run)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result)[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
