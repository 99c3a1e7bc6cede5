"""Role temperatures on verl: envace's trainer gives every row its log-probs at its own sampling
temperature, and they equal the embedded trainer's on the same tokens.

Real pieces: a tiny random model and envace's HF engine sample Act rows at 1.0 and Rehearse rows at 0.01;
verl's V1 adapter (`AgentLoopWorkerTQ._agent_loop_postprocess`) stores them in a real TransferQueue on a
local Ray; envace's trainer runs verl's own `_compute_old_log_prob` / `_compute_ref_log_prob`. The one
stand-in is the FSDP worker group (it needs GPUs and torch.distributed): `_EngineWorkers` does on CPU
what verl's worker does with the batch it is handed — reads the rows through verl's TransferQueue bridge
(`_meta_to_realdata`, which also writes `extra_info` over them), splits them into verl's dynamic
micro-batches (`prepare_micro_batches`, rows regrouped by token count), runs verl's own
`FSDPEngineWithLMHead.prepare_model_inputs` / `prepare_model_outputs` around the model's forward, restores
the row order (`postprocess_batch_func`) and puts the log-probs back. The embedded trainer's values come from
`packed_logprobs`.
Only a GPU can check: verl's remove-padding (flash-attention varlen) branch, its micro-batching and the
FSDP update; they consume the same per-row `temperature` tensor.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from envace.trainers.verl.config import LoopSettings, RoleSampling

pytestmark = pytest.mark.verl

ACT_T, REHEARSE_T = 1.0, 0.01


@dataclass
class Row:
    """The fields of a training row the embedded trainer's packing and log-probs read."""

    role: object
    prompt_ids: list
    response_ids: list
    old_logprobs: list
    temperature: float
    prompt_index: int
    trajectory_key: int


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    from envace.models.corpus import world_corpus
    from envace.models.loading import load_policy
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    torch.manual_seed(0)
    cfg = TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                          intermediate_size=128, vocab_size=400, seed=0)
    path = init_tiny_model(world_corpus(30, seed=0), tmp_path_factory.mktemp("tiny_t") / "model", cfg)
    model, tok = load_policy(path, device="cpu", dtype=torch.float32)
    return model, tok


@pytest.fixture(scope="module")
def sampled_rows(tiny_policy):
    """8 rows sampled by envace's HF engine: 4 Act at 1.0, 4 Rehearse at 0.01 (training-row records)."""
    from envace.engines.base import GenRequest
    from envace.engines.hf import HFEngine
    from envace.types import Role

    model, tok = tiny_policy
    gen = torch.Generator().manual_seed(1)
    reqs, roles = [], []
    for i in range(8):
        role, t = (Role.ACT, ACT_T) if i % 2 == 0 else (Role.REHEARSE, REHEARSE_T)
        prompt = torch.randint(5, len(tok) - 1, (6 + i,), generator=gen).tolist()
        reqs.append(GenRequest(prompt, temperature=t, max_new_tokens=6, seed=10 + i))
        roles.append(role)
    results = HFEngine(model, tok).generate(reqs)
    return [Row(role=role, prompt_ids=list(r.prompt_ids), response_ids=list(res.token_ids),
                old_logprobs=list(res.logprobs), temperature=r.temperature, prompt_index=0, trajectory_key=i)
            for i, (role, r, res) in enumerate(zip(roles, reqs, results))]


def embedded_logprobs(model, rows, pad_id) -> list[torch.Tensor]:
    from envace.trainers.packed_readout import packed_logprobs
    from envace.trainers.packing import pack_rows

    with torch.no_grad():
        out = packed_logprobs(model, pack_rows(rows), rows, pad_id)
    by_row = {r: out.logprobs[i, : len(rows[r].response_ids)] for i, r in enumerate(out.rows)}
    return [by_row[i] for i in range(len(rows))]


def store_rows(rows, tokenizer, uid: str, *, record_temperature: bool = True):
    """The rows as the envace agent loop returns them, stored by verl's own V1 adapter; their KVBatchMeta."""
    import transfer_queue as tq
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    worker = object.__new__(AgentLoopWorkerTQ.__ray_actor_class__)  # verl's adapter, minus Ray
    worker.reward_loop_worker_handles, worker.distillation_enabled, worker.processor = None, False, None
    worker.tokenizer = tokenizer
    outs = []
    for r in rows:
        extra = {"role": r.role.value, "reward_extra_info": {}}
        if record_temperature:
            extra["temperature"] = r.temperature
        outs.append(AgentLoopOutput(prompt_ids=r.prompt_ids, response_ids=r.response_ids,
                                    response_mask=[1] * len(r.response_ids), response_logprobs=r.old_logprobs,
                                    reward_score=1.0, num_turns=2, metrics=AgentLoopMetrics(),
                                    extra_fields=extra))
    asyncio.run(worker._agent_loop_postprocess(outs, False, uid=uid, session_id=0, global_steps=1))
    keys = [f"{uid}_0_{i}" for i in range(len(rows))]
    listed = tq.kv_list("train")["train"]
    return tq.KVBatchMeta(partition_id="train", keys=keys, tags=[listed[k] for k in keys])


class _EngineWorkers:
    """CPU stand-in for verl's FSDP actor / reference worker group (see the module docstring)."""

    def __init__(self, model):
        from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

        self.model = model
        self.engine = object.__new__(FSDPEngineWithLMHead)  # its __init__ builds FSDP on GPUs
        self.engine.engine_config = SimpleNamespace(entropy_checkpointing=False)
        self.engine.pad_to_length = False
        self.temperatures = []  # what each call's rows carried as `temperature`
        self.updates = []
        self.micro_batches = []  # micro-batches per log-prob call

    def _rows(self, batch):
        from verl.utils import tensordict_utils as tu
        from verl.utils.transferqueue_utils import _meta_to_realdata

        data = _meta_to_realdata(batch)  # what verl's tqbridge hands the worker method
        # the padded-attention path: flash-attention's varlen packing (remove_padding) needs a GPU
        tu.assign_non_tensor(data, use_remove_padding=False, calculate_entropy=True)
        temp = data["temperature"]
        self.temperatures.append(temp.clone() if isinstance(temp, torch.Tensor) else temp)
        return data

    def compute_log_prob(self, batch):
        import transfer_queue as tq
        from verl.utils import tensordict_utils as tu
        from verl.workers.engine.utils import postprocess_batch_func, prepare_micro_batches

        data = self._rows(batch)
        # verl's dynamic micro-batching: rows regrouped by token count (reordered), then restored
        tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=32)
        micro_batches, indices = prepare_micro_batches(data, dp_group=None, same_micro_num_in_dp=True)
        self.micro_batches.append(len(micro_batches))
        outs = []
        with torch.no_grad():
            for mb in micro_batches:
                inputs, args = self.engine.prepare_model_inputs(mb)
                outs.append({"model_output": self.engine.prepare_model_outputs(
                    self.model(**inputs, use_cache=False), args, mb, None)})
        out = postprocess_batch_func(outs, indices, data)["model_output"]
        tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                        fields=TensorDict({"log_probs": out["log_probs"], "entropy": out["entropy"]},
                                          batch_size=len(batch)))
        return batch

    compute_ref_log_prob = compute_log_prob

    def update_actor(self, batch):
        self._rows(batch)
        self.updates.append(dict(batch.extra_info))
        return {"metrics": {"mfu": [0.0]}}


def bare_trainer(config, workers, ref_workers=None):
    from envace.trainers.verl.trainer import EnvaceTrainer

    trainer = object.__new__(EnvaceTrainer)  # __init__ would start Ray worker groups on GPUs
    trainer.config = config
    trainer.actor_rollout_wg = workers
    trainer.ref_policy_wg = ref_workers or workers
    trainer.ref_in_actor = False
    return trainer


def fetch(batch, field):
    import transfer_queue as tq

    got = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=[field])
    return list(got[field].unbind(0))


def role_config(verl_config_factory, *extra):
    return verl_config_factory(*extra, loop=LoopSettings(act=RoleSampling(temperature=ACT_T),
                                                         rehearse=RoleSampling(temperature=REHEARSE_T)))


@pytest.mark.slow
def test_old_and_ref_logprobs_at_each_rows_temperature(verl_api, verl_config_factory, tiny_policy, sampled_rows,
                                                       transfer_queue):
    model, tok = tiny_policy
    rows = sampled_rows
    batch = store_rows(rows, tok, "temps")
    config = role_config(verl_config_factory)
    assert config.actor_rollout_ref.rollout.temperature == ACT_T  # verl's scalar is right for Act only
    workers, ref_workers = _EngineWorkers(model), _EngineWorkers(model)
    trainer = bare_trainer(config, workers, ref_workers)

    metrics: dict = {}
    trainer._compute_old_log_prob(batch, metrics)
    trainer._compute_ref_log_prob(batch, metrics)

    want_t = torch.tensor([r.temperature for r in rows])
    assert min(workers.micro_batches) > 1  # several micro-batches, rows regrouped across them
    for seen in workers.temperatures + ref_workers.temperatures:
        assert isinstance(seen, torch.Tensor) and torch.equal(seen, want_t)  # per row, not verl's scalar
    expected = embedded_logprobs(model, rows, tok.pad_token_id)
    for field in ("old_log_probs", "ref_log_prob"):
        for i, (got, want) in enumerate(zip(fetch(batch, field), expected)):
            assert got.shape == want.shape
            # same weights and tokens, two implementations; logits / 0.01 magnify float noise 100x
            assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (field, i, rows[i].role, got, want)
    # the sampling engine's own log-probs (at the row's temperature) agree too
    for got, row in zip(fetch(batch, "old_log_probs"), rows):
        assert torch.allclose(got, torch.tensor(row.old_logprobs), rtol=1e-4, atol=1e-4)
    # the update's micro-batches carry the same per-row temperatures; verl's scalar is gone
    trainer._update_actor(batch, {})
    assert torch.equal(workers.temperatures[-1], want_t) and "temperature" not in workers.updates[-1]
    # restored after each call
    assert trainer.actor_rollout_wg is workers and trainer.ref_policy_wg is ref_workers

    # the check can fail: at verl's single rollout.temperature the Rehearse rows come out far off
    at_rollout_t = embedded_logprobs(model, [replace(r, temperature=ACT_T) for r in rows], tok.pad_token_id)
    rehearse = [i for i, r in enumerate(rows) if r.temperature == REHEARSE_T]
    gaps = [float((at_rollout_t[i] - expected[i]).abs().max()) for i in rehearse]
    assert min(gaps) > 1e-2, gaps


def test_one_temperature_keeps_verls_scalar(verl_api, verl_config_factory, tiny_policy, sampled_rows,
                                            transfer_queue):
    model, tok = tiny_policy
    rehearse_only = [r for r in sampled_rows if r.temperature == REHEARSE_T]
    batch = store_rows(rehearse_only, tok, "uniform")
    workers = _EngineWorkers(model)
    bare_trainer(role_config(verl_config_factory), workers)._compute_old_log_prob(batch, {})
    (seen,) = workers.temperatures
    assert seen == pytest.approx(REHEARSE_T)  # one scalar, at the rows' temperature, not rollout.temperature
    for got, want in zip(fetch(batch, "old_log_probs"), embedded_logprobs(model, rehearse_only, tok.pad_token_id)):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)


def test_rows_without_a_record_use_the_rollout_temperature(verl_api, verl_config_factory, tiny_policy,
                                                           sampled_rows, transfer_queue):
    model, tok = tiny_policy
    batch = store_rows(sampled_rows[:2], tok, "norecord", record_temperature=False)  # another agent loop's rows
    workers = _EngineWorkers(model)
    bare_trainer(role_config(verl_config_factory), workers)._compute_old_log_prob(batch, {})
    assert workers.temperatures == [pytest.approx(ACT_T)]


def test_mixed_temperatures_refuse_fused_kernels(verl_api, verl_config_factory, tiny_policy, sampled_rows,
                                                 transfer_queue):
    model, tok = tiny_policy
    batch = store_rows(sampled_rows[:2], tok, "fused")
    config = role_config(verl_config_factory, "actor_rollout_ref.model.use_fused_kernels=true")
    trainer = bare_trainer(config, _EngineWorkers(model))
    with pytest.raises(ValueError, match="use_fused_kernels=false"):
        trainer._compute_old_log_prob(batch, {})


def test_temperature_division_is_fp32_in_verls_engine(verl_api):
    """bf16 logits / 0.01: envace's division (installed in verl's FSDP engine) matches an fp64 reference to
    1e-3 nats; verl's bf16 division, computed here the way verl writes it, is off by over a nat."""
    import verl.workers.engine.fsdp.transformer_impl as engine

    from envace.trainers.verl.logits import scale_logits_fp32

    assert engine._scale_logits_by_temperature is scale_logits_fp32  # what verl's forward calls
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(256, 4096, generator=gen) * 3).to(torch.bfloat16)
    temperature = torch.full((256,), 0.01)  # verl's per-row temperatures, unsqueezed over the vocab
    tokens = torch.randint(0, 4096, (256, 1), generator=gen)

    def logprobs(scaled):
        return torch.log_softmax(scaled.double(), dim=-1).gather(1, tokens)

    reference = logprobs(logits.double() / 0.01)
    envace = logprobs(engine._scale_logits_by_temperature(logits, temperature.unsqueeze(-1), is_unit_temperature=False))
    naive = logprobs(logits / temperature.unsqueeze(-1).clamp(min=1e-8).to(logits.dtype))  # verl 0.9.1's body
    assert (envace - reference).abs().max() < 1e-3
    assert (naive - reference).abs().max() > 1.0
    assert engine._scale_logits_by_temperature(logits, 1.0, is_unit_temperature=True) is logits  # T=1: no copy
