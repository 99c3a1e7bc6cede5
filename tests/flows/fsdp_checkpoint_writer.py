"""Write a checkpoint in verl's FSDP format on CPU, with verl's own checkpoint manager.

    python -m torch.distributed.run --nproc-per-node 2 --master-port P fsdp_checkpoint_writer.py HF_DIR OUT_DIR

Every rank loads the HF model, shards it with FSDP2 (`fully_shard`) over a gloo process group on a CPU
device mesh named "fsdp" (as verl's workers name it), takes one SGD step so the weights differ from
HF_DIR, and calls `FSDPCheckpointManager.save_checkpoint(OUT_DIR)`: per-rank
`model_world_size_W_rank_R.pt` shards of DTensors, optimizer and extra state, `fsdp_config.json` and
`huggingface/` (config + tokenizer) -- what a verl training run leaves in `global_step_N/actor`. Rank 0
also saves the stepped full weights to OUT_DIR/../expected.pt, the reference the merge is checked against.

Departure from a verl run: CPU + gloo instead of CUDA + NCCL (the manager's CUDA-only parts -- CPU
offload of shards, the accelerator RNG state -- switch themselves off when no accelerator is usable);
one step of plain SGD instead of the actor update.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(hf_dir: str, out_dir: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(hf_dir)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("fsdp",))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.arange(2, 18).view(2, 8) % model.config.vocab_size
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    manager = FSDPCheckpointManager(model=model, optimizer=opt, lr_scheduler=None, processing_class=tokenizer,
                                    checkpoint_config={"save_contents": ["model", "optimizer", "extra"]})
    manager.save_checkpoint(out_dir, global_step=1)
    full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
            for k, v in model.state_dict().items()}
    if rank == 0:
        torch.save(full, Path(out_dir).parent / "expected.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
