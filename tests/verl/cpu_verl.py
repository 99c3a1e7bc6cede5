"""The CPU stand-ins of a verl job, loaded in every verl process through `VERL_USE_EXTERNAL_MODULES`
(after envace's plugin): verl's platform registry gets the CPU platform (cpu_platform.py; selected by
`VERL_PLATFORM=cpu`), vLLM's import surface is faked so verl's vLLM modules import (cpu_rollout.py), and
verl's vLLM server class is replaced by the generating CPU server (cpu_gen_server.py) at the module global
verl's `vLLMReplica` wraps with `ray.remote`, and verl's FSDP engine is registered for the cpu device.

Nothing else of verl is replaced: its trainer, FSDP workers, replicas, load balancer, agent-loop
workers, TransferQueue, weight-sync sender, checkpoint manager and logger all run as shipped.
"""

from __future__ import annotations

import cpu_platform  # noqa: F401  (registers the "cpu" platform)
from cpu_rollout import install_vllm_import_surface

install_vllm_import_surface()

import sys  # noqa: E402

from verl.workers.rollout.vllm_rollout import vllm_async_server  # noqa: E402

# A server actor's process imports cpu_gen_server first (to unpickle its class), which imports verl and so
# this module: there cpu_gen_server is half-built, and that process launches no replicas anyway.
if "cpu_gen_server" not in sys.modules:
    from cpu_gen_server import CPUGenServer

    vllm_async_server.vLLMHttpServer = CPUGenServer

# verl's own FSDP engine, registered for the cpu device through verl's engine registry (verl registers it
# for cuda and npu only)
from verl.workers.engine.base import EngineRegistry  # noqa: E402
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead  # noqa: E402

if "cpu" not in EngineRegistry._engines.get("language_model", {}).get("fsdp", {}):
    EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cpu")(FSDPEngineWithLMHead)

# A spy on envace's trainer (only with ENVACE_TEST_BATCH_DUMP set): after each step's advantages, the rows as
# TransferQueue holds them (key, uid, role, scored, padding, reward, advantage) go to one JSON file per step, so
# the test can recompute role-wise GRPO on the same rewards after the job has ended. It changes nothing.
BATCH_DUMP_ENV = "ENVACE_TEST_BATCH_DUMP"


def _spy_advantages() -> None:
    import json
    import os
    from pathlib import Path

    import transfer_queue as tq

    from envace.trainers.verl.trainer import EnvaceTrainer

    real = EnvaceTrainer._compute_advantage
    if getattr(real, "envace_test_spy", False):
        return

    def compute_advantage(self, batch, metrics):
        out = real(self, batch, metrics)
        dump = os.environ.get(BATCH_DUMP_ENV)
        if dump:
            td = tq.kv_batch_get(keys=out.keys, partition_id=out.partition_id,
                                 select_fields=["uid", "rm_scores", "advantages", "response_mask", "extra_fields"])
            mask = td["response_mask"].to_padded_tensor(padding=0)
            adv = td["advantages"].to_padded_tensor(padding=0.0)
            rew = td["rm_scores"].to_padded_tensor(padding=0.0)
            extra = td.pop("extra_fields").tolist()
            rows = []
            for i, key in enumerate(out.keys):
                fields = getattr(extra[i], "data", extra[i]) or {}
                m = mask[i].bool()
                rows.append({"key": key, "uid": str(td["uid"][i] if not hasattr(td["uid"], "tolist")
                                                    else td["uid"].tolist()[i]),
                             "role": fields.get("role"), "scored": bool(fields.get("envace_scored", True)),
                             "padding": bool((out.tags[i] or {}).get("is_padding", False)),
                             "reward": float(rew[i].sum()), "advantage": adv[i][m].tolist()})
            Path(dump).mkdir(parents=True, exist_ok=True)
            (Path(dump) / f"step{self.global_steps}.json").write_text(json.dumps(rows))
        return out

    compute_advantage.envace_test_spy = True
    EnvaceTrainer._compute_advantage = compute_advantage


_spy_advantages()
