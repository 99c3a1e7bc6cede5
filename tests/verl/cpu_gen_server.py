"""A CPU generation server standing in for verl's `vLLMHttpServer` that really generates and really
receives verl's weight updates (vLLM itself cannot be installed here).

Registered where verl's `vLLMReplica` looks for its server class (the module global
`vllm_async_server.vLLMHttpServer`, see cpu_verl.py), so verl's own replica launches it as a named Ray actor,
verl's worker-side `ServerAdapter` finds it by name, and verl's load balancer / client send it requests.

- `generate`: token ids in, token ids + the sampled tokens' log-probs out, through envace's embedded
  engine (`envace.engines.hf.HFEngine`): per-request temperature, top_p, max_tokens, stop strings (kept
  in the output: envace always asks `include_stop_str_in_output`) and seed. Parameters this stand-in
  does not implement (top_k, repetition penalty, stop strings dropped from the output) are refused
  with an error rather than ignored.
- weight sync: `collective_rpc("update_weights_from_ipc", use_shm=True)` runs verl's own
  `BucketedWeightReceiver` on the socket path verl's vLLM worker extension would bind, reading the
  buckets verl's `BucketedWeightSender` writes into shared memory, and copies each tensor into the
  model. After each `set_global_steps(s)` the server writes its weights to
  `$ENVACE_TEST_SERVER_DUMP/{server actor name}_step{s}.safetensors`, so a test can compare them with the
  FSDP actor's checkpoint of step s after the job has ended.
- sleep / wake_up / clear_kv_cache: no-ops (the model stays in memory; there is no KV cache between calls).

What it cannot stand for: vLLM's sampler and scheduler, CUDA IPC handles, tensor parallelism.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import torch
import verl  # noqa: F401  (first: verl loads cpu_verl, which imports cpu_rollout whole)
from cpu_rollout import CPUServer

DUMP_ENV = "ENVACE_TEST_SERVER_DUMP"
# sampling parameters verl or envace may send, and the values this stand-in implements
_NEUTRAL = {"top_k": (-1, 0, None), "repetition_penalty": (1.0, None), "ignore_eos": (False, None),
            "min_p": (0.0, None), "presence_penalty": (0.0, None), "frequency_penalty": (0.0, None)}


class CPUGenServer(CPUServer):
    """verl's vLLM server interface over envace's embedded generation engine (CPU)."""

    def __init__(self, config, model_config, rollout_mode, workers, replica_rank, node_rank, gpus_per_node,
                 nnodes, cuda_visible_devices, **kwargs):
        super().__init__(config, model_config, rollout_mode, workers, replica_rank, node_rank, gpus_per_node,
                         nnodes, cuda_visible_devices, **kwargs)
        from envace.engines.hf import HFEngine
        from envace.models.loading import load_policy

        self.config = config
        path = model_config.get("local_path") or model_config.path  # a DictConfig here, as verl passes it
        model, tokenizer = load_policy(path, device="cpu", dtype=torch.float32)
        self.engine = HFEngine(model, tokenizer, device="cpu", max_batch=1)
        self.global_steps: int | None = None
        self.requests = 0
        self.updates = 0
        self._lock = threading.Lock()  # one generation or weight load at a time

    # ----- generation (token in, token out) -----

    def _request(self, prompt_ids: list[int], params: dict[str, Any]):
        from envace.engines.base import GenRequest

        for key, allowed in _NEUTRAL.items():
            if params.get(key) not in allowed:
                raise ValueError(f"CPUGenServer: sampling parameter {key}={params[key]!r} is not implemented "
                                 f"(only {allowed}); vLLM itself would honour it")
        stop = params.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        if stop and not params.get("include_stop_str_in_output", False):
            raise ValueError("CPUGenServer keeps stop strings in the output; send include_stop_str_in_output=True")
        room = int(self.config.max_model_len) - len(prompt_ids)
        if room < 1:
            raise ValueError(f"Prompt length ({len(prompt_ids)}) leaves no room to generate within "
                             f"max_model_len {self.config.max_model_len}")
        max_tokens = params.get("max_tokens", params.get("max_new_tokens", self.config.response_length))
        return GenRequest(prompt_ids=[int(t) for t in prompt_ids], temperature=float(params.get("temperature", 1.0)),
                          top_p=float(params.get("top_p", 1.0)), max_new_tokens=max(1, min(int(max_tokens), room)),
                          stop=list(stop), seed=params.get("seed"))

    def _generate(self, req) -> Any:
        with self._lock, torch.no_grad():
            return self.engine.generate([req])[0]

    async def generate(self, prompt_ids, sampling_params, request_id, image_data=None, video_data=None,
                       audio_data=None, mm_processor_kwargs=None, priority=0, kv_transfer_params=None):
        from verl.workers.rollout.replica import TokenOutput

        params = dict(sampling_params)
        req = self._request(list(prompt_ids), params)
        out = await asyncio.to_thread(self._generate, req)
        self.requests += 1
        return TokenOutput(token_ids=list(out.token_ids), log_probs=list(out.logprobs) if params.get("logprobs")
                           else None, stop_reason="completed", extra_fields={"global_steps": self.global_steps})

    # ----- weight sync (verl's receiver, shared memory instead of CUDA IPC) -----

    def _receive(self, use_shm: bool) -> None:
        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver

        if not use_shm:
            raise ValueError("CPUGenServer receives weights over shared memory only (no CUDA IPC on CPU)")
        params = dict(self.engine.model.named_parameters(remove_duplicate=False))  # tied lm_head included
        seen: set[str] = set()
        unknown: list[str] = []

        def load(weights: list[tuple[str, torch.Tensor]], is_last: bool) -> None:
            # an error here would leave verl's sender waiting for its acknowledgement forever: collect, raise after
            for name, tensor in weights:
                if name in params:
                    params[name].data.copy_(tensor.to(params[name].dtype))
                    seen.add(name)
                else:
                    unknown.append(name)

        with self._lock, torch.no_grad():
            BucketedWeightReceiver(zmq_handle=self.receiver_zmq_handle(), device=torch.device("cpu"),
                                   use_shm=True).receive_weights(load)
        if unknown:
            raise KeyError(f"CPUGenServer: the actor sent {unknown[:5]}, which the model does not have "
                           f"(it has e.g. {sorted(params)[:5]})")
        missing = set(params) - seen
        if missing:
            raise KeyError(f"CPUGenServer: the weight update left {sorted(missing)} unchanged")
        self.updates += 1

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.synced.append({"method": method})
        if method == "update_weights_from_ipc":
            await asyncio.to_thread(self._receive, bool((kwargs or {}).get("use_shm", False)))
            return None
        raise NotImplementedError(f"CPUGenServer: collective_rpc({method!r}) is not implemented")

    async def set_global_steps(self, global_steps):
        self.global_steps = global_steps
        dump = os.environ.get(DUMP_ENV)
        if dump:
            from safetensors.torch import save_file

            Path(dump).mkdir(parents=True, exist_ok=True)
            state = {k: v.detach().clone().contiguous() for k, v in self.engine.model.state_dict().items()}
            import ray

            name = ray.get_runtime_context().get_actor_name()  # verl's: {rollout.name}_server_{replica}_{node}
            save_file(state, str(Path(dump) / f"{name}_step{global_steps}.safetensors"),
                      metadata={"requests": str(self.requests), "updates": str(self.updates)})

    def stats(self) -> dict[str, Any]:
        return {"requests": self.requests, "updates": self.updates, "global_steps": self.global_steps}
