"""verl's real trainer end to end on CPU: `envace train --backend verl` -> `python -m verl.trainer.main_ppo` on a
private local Ray head (`ray start --head`, one declared GPU per role pool), envace's V1 trainer, verl's FSDP2
engine over gloo, verl's agent-loop workers running envace's loop, 2 steps with validation and a checkpoint each
step; then a resume to step 3; then `python -m verl.model_merger merge`; then `envace eval` on the merged model.
For `policy=shared` (one actor, one server set) and `policy=per_role` (an Act and a Rehearse actor, each with its
own servers).

The CPU stand-ins (each registered through verl's own extension points, loaded by `VERL_USE_EXTERNAL_MODULES`):
- cpu_platform.py: a "cpu" platform in verl's `PlatformRegistry` (`VERL_PLATFORM=cpu`): gloo, no CUDA IPC,
  tensors on the CPU. verl's process-group backend string names the cpu device twice on it
  ("cpu:gloo,cpu:gloo", verl/utils/distributed.py), which torch refuses: the duplicate is collapsed.
- cpu_verl.py: verl's own FSDP engine registered for device "cpu" in verl's `EngineRegistry`; the vLLM
  import surface faked (vLLM cannot be installed here); verl's vLLM server class replaced by cpu_gen_server.py,
  which really generates (envace's embedded engine: token ids in, token ids + log-probs out, temperature,
  top_p, max_tokens, stop strings, seed) and really receives verl's weight updates through verl's own
  `BucketedWeightReceiver` over shared memory (verl's fallback when a platform has no IPC); sleep / wake are no-ops.
- The LLM judge is a stand-in HTTP endpoint (the reference judge is a 30B model on vLLM): its verdict per
  checklist item comes from a hash of the request, so rewards differ between trajectories and the role-wise
  advantages are not all zero.

What is asserted: after each weight sync each role's server's weights equal its FSDP actor's checkpoint of that
step (bit for bit; fp32 both sides), and they moved; per_role: the Rehearse actor parts from the Act actor at the
first step whose batch carries a non-zero advantage; each step's advantages, as verl's TransferQueue holds them after
envace's `_compute_advantage`, equal `envace.algos.role_grpo_advantages` on the same rewards; envace's per-role
metrics reach MLflow through verl's logger; the resumed job starts from step 2's checkpoint (its first sync holds
step 2's weights) and trains step 3 only; the merged model equals step 3's actor and `envace eval` runs on it.

What this cannot prove: vLLM's sampler, scheduler and stop handling (the server is envace's engine), CUDA IPC
weight transfer (shared memory here), NCCL collectives and more than one data-parallel rank, GPU memory use and
offload, bf16 kernels, flash-attention / remove-padding, multi-node placement, speed.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envace.engines.server import background_server

pytestmark = [pytest.mark.verl, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RUN_TIMEOUT_S = 600


def _verdict(content: str) -> bool:
    return int(hashlib.sha256(content.encode()).hexdigest(), 16) % 2 == 0


@pytest.fixture(scope="module")
def stand_in_judge():
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        answer = "true" if _verdict(json.dumps(body["messages"])) else "false"
        text = f'{{"analysis_of_focus": "seen", "analysis_of_pass_condition": "checked", "answer": {answer}}}'
        return JSONResponse({"choices": [{"message": {"role": "assistant", "content": text},
                                          "finish_reason": "stop"}], "usage": {}})

    with background_server(app) as url:
        yield url


def _launch(cfg_path: Path, env: dict[str, str], log: Path) -> str:
    """`envace train --backend verl CONFIG` in its own process group (killed whole on a timeout), from the
    config's folder (Hydra writes its `outputs/` run folder into the working directory)."""
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "envace.cli", "train", "--backend", "verl", str(cfg_path)],
                                cwd=cfg_path.parent, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=RUN_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    text = log.read_text(errors="replace")
    assert rc == 0, text[-6000:]
    return text


def _ckpt_weights(ckpt: Path, step: int, actor: str = "actor") -> dict:
    import torch

    state = torch.load(ckpt / f"global_step_{step}" / actor / "model_world_size_1_rank_0.pt", map_location="cpu",
                       weights_only=False)
    return {k: (v.to_local() if hasattr(v, "to_local") else v).detach() for k, v in state.items()}


# (server actor name, checkpoint folder) per role: verl's Act stack, and the Rehearse stack of policy=per_role
STACKS = {"act": ("vllm_server_0_0", "actor"), "rehearse": ("envace_rehearse_vllm_server_0_0", "rehearse_actor")}


def _check_server_equals_actor(dump: Path, ckpt: Path, steps: list[int], role: str = "act") -> dict[int, dict]:
    import torch
    from safetensors.torch import load_file

    server_name, actor_dir = STACKS[role]
    synced = {}
    for step in steps:
        server = load_file(str(dump / f"{server_name}_step{step}.safetensors"))
        actor = _ckpt_weights(ckpt, step, actor_dir)
        assert sorted(server) == sorted(actor), (sorted(server), sorted(actor))
        unequal = [k for k in actor if not torch.equal(server[k], actor[k].to(server[k].dtype))]
        assert not unequal, f"step {step}: the {role} server's {unequal} differ from the FSDP {actor_dir}'s"
        synced[step] = server
    return synced


def _check_role_advantages(rows: list[dict]) -> dict[str, int]:
    import torch

    from envace.algos import role_grpo_advantages
    from envace.trainers.verl.advantage import row_key_parts

    real = [r for r in rows if not r["padding"]]
    rewards = [r["reward"] if r["scored"] else float("nan") for r in real]
    trajs = ["_".join(row_key_parts(r["key"])[:2]) for r in real]
    expected = role_grpo_advantages(rewards, [r["uid"] for r in real], trajs, [r["role"] for r in real])
    for r, want in zip(real, expected.tolist()):
        got = torch.tensor(r["advantage"])
        assert len(got) and torch.allclose(got, torch.full_like(got, want), atol=1e-6), (r["key"], r["role"], want,
                                                                                        got[:4])
    assert all(not any(r["advantage"]) for r in rows if r["padding"])
    roles = [r["role"] for r in real]
    return {role: roles.count(role) for role in set(roles)}


@pytest.fixture(scope="module")
def act_model(tmp_path_factory):
    """A tiny model briefly SFT'd on Act and Rehearse demonstrations (half a minute; Rehearse in the compact,
    no-few-shot prompt the run uses, so the prompts fit its 2048 positions), and the first 4 of 300 training
    tasks on which its greedy first Act turn is a valid tool call: every episode then holds Rehearse rows as well
    as Act rows, and rehearsed results it can act on, so episodes reach the judge with different outcomes."""
    import torch

    from envace.engines.base import GenRequest
    from envace.engines.hf import HFEngine
    from envace.models.corpus import world_corpus
    from envace.models.loading import load_policy
    from envace.models.tiny import TinyModelConfig, init_tiny_model
    from envace.roles.act import act_prompt_ids, parse_act
    from envace.trainers.config import SFTConfig
    from envace.trainers.sft import sft
    from envace.worlds.generator import generate_tasks

    root = tmp_path_factory.mktemp("e2e_model")
    tiny = init_tiny_model(world_corpus(120, seed=0), root / "tiny",
                           TinyModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                                           intermediate_size=128, vocab_size=700, max_position=2048,
                                           seed=0))
    sft(SFTConfig(model=str(tiny), out_dir=str(root / "sft"), steps=600, batch_size=16, lr=3e-3, warmup_steps=10,
                  act_fraction=0.5, few_shot=False, rehearse_style="compact", threads=1, progress=False,
                  data={"n_tasks": 200}))
    model_dir = root / "sft" / "model"
    model, tokenizer = load_policy(model_dir, device="cpu", dtype=torch.float32)
    engine = HFEngine(model, tokenizer, device="cpu", max_batch=1)
    calling = []
    for task in generate_tasks(300, "train", 0):  # about one task in 25 at this size
        if len(calling) == 4:
            break
        ids = act_prompt_ids(tokenizer, list(task.messages), task.tools)
        out = engine.generate([GenRequest(prompt_ids=ids, temperature=0.0, max_new_tokens=80, stop=[], seed=0)])[0]
        parsed = parse_act(tokenizer.decode(out.token_ids), task.tools)
        if parsed.calls and parsed.error is None:
            calling.append(task)
    assert len(calling) >= 4, f"the SFT'd model made a valid first call on {len(calling)} of 300 tasks"
    return model_dir, calling[:4]


@pytest.mark.parametrize("policy", ["shared", "per_role"])
def test_verl_trains_resumes_merges_and_evaluates_on_cpu(tmp_path, stand_in_judge, act_model, policy):
    model_dir, train_tasks = act_model
    from safetensors.torch import load_file

    from envace.cluster.ray_head import LocalRayHead
    from envace.trainers.verl.dataset import export_verl_dataset
    from envace.worlds.generator import generate_tasks

    roles = ["act", "rehearse"] if policy == "per_role" else ["act"]
    train = export_verl_dataset(train_tasks, tmp_path / "train.parquet")
    val = export_verl_dataset(generate_tasks(2, "val", 1), tmp_path / "val.parquet")
    ckpt, mlflow_uri = tmp_path / "ckpt", f"sqlite:///{tmp_path / 'mlflow.db'}"
    env_extra = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]), "VERL_PLATFORM": "cpu",
                 "VERL_USE_EXTERNAL_MODULES": "cpu_verl,envace.trainers.verl_plugin", "ENVACE_TEST_FAKE_VLLM": "1",
                 "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                 "MLFLOW_TRACKING_URI": mlflow_uri}
    per_run = ["ENVACE_TEST_SERVER_DUMP", "ENVACE_TEST_BATCH_DUMP"]

    def config(steps: int) -> Path:
        cfg = {
            "model": str(model_dir), "train_files": [str(train)], "val_files": [str(val)], "rollout": "vllm",
            "policy": policy, "n": 2, "train_batch_size": 2, "lr": 1e-3, "max_prompt_length": 1536,
            "rollout_prompt_length": 1536, "max_response_length": 96, "max_model_len": 2048, "nnodes": 1,
            "n_gpus_per_node": 1, "total_training_steps": steps, "save_freq": 1, "test_freq": 1,
            "max_checkpoints_kept": None, "loggers": ["console", "mlflow"], "experiment": f"cpu_e2e_{policy}",
            "checkpoint_dir": str(ckpt), "python": sys.executable,
            # Act near-greedy (the SFT'd model's calls), Rehearse sampled: rewards differ between trajectories
            "loop": {"act": {"temperature": 0.01, "max_tokens": 80}, "rehearse": {"temperature": 1.0, "max_tokens": 48},
                     "max_assistant_turns": 2, "threads": 2, "reward": "checklist_llm",
                     "few_shot": False, "rehearse_style": "compact",  # Rehearse prompts fit the tiny context
                     "judge": {"base_url": stand_in_judge, "model": "stand-in", "max_retries": 0}},
            "forward_env": sorted([*env_extra, *per_run]),
            "overrides": ["trainer.device=cpu", "trainer.val_before_train=false",
                          "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2",
                          "data.dataloader_num_workers=0",
                          # verl starts 8 agent-loop and 8 reward workers by default (a process each); one of
                          # each serves 2 prompts x 2 samples on 2 cores
                          "actor_rollout_ref.rollout.agent.num_workers=1", "reward.num_workers=1",
                          "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"],
        }
        path = tmp_path / f"verl_{steps}.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    head = LocalRayHead(num_cpus=8, num_gpus=len(roles), env=env_extra).start()  # per_role: a Rehearse pool too
    try:
        base = {**os.environ, **env_extra, **head.client_env(), "RAY_ADDRESS": head.address}
        runs = {}
        for name, steps in (("first", 2), ("resumed", 3)):
            env = {**base, "ENVACE_TEST_SERVER_DUMP": str(tmp_path / name / "dump"),
                   "ENVACE_TEST_BATCH_DUMP": str(tmp_path / name / "dump_batch")}
            runs[name] = _launch(config(steps), env, tmp_path / f"{name}.log")
    finally:
        head.stop()

    # 1. weight sync: each role's server holds its FSDP actor's weights after every sync, and training moved them
    first, resumed = tmp_path / "first", tmp_path / "resumed"
    init_model = load_file(str(model_dir / "model.safetensors"))
    synced = {}
    for role in roles:
        synced[role] = _check_server_equals_actor(first / "dump", ckpt, [1, 2], role)
        initial = load_file(str(first / "dump" / f"{STACKS[role][0]}_step0.safetensors"))
        assert all(initial[k].equal(init_model[k].to(initial[k].dtype)) for k in init_model)  # step 0 = model files
        for a, b in ((initial, synced[role][1]), (synced[role][1], synced[role][2])):
            assert any(not a[k].equal(b[k]) for k in a), f"a training step left every {role} weight unchanged"

    # 2. role-wise advantages in verl's batch = envace.algos.role_grpo_advantages on the same rewards
    counts = {}
    for run, steps in ((first, [1, 2]), (resumed, [3])):
        assert sorted(p.name for p in (run / "dump_batch").glob("step*.json")) == [f"step{s}.json" for s in steps]
        for s in steps:
            rows = json.loads((run / "dump_batch" / f"step{s}.json").read_text())
            counts[s] = _check_role_advantages(rows)
            assert counts[s].get("act", 0) >= 2, counts  # every trajectory acts at least once
    assert all(c.get("rehearse", 0) >= 1 for c in counts.values()), counts  # the SFT'd Act made tool calls
    rewards = [r["reward"] for s in (1, 2) for r in json.loads((first / "dump_batch" / f"step{s}.json").read_text())
               if not r["padding"]]
    assert len(set(rewards)) > 1, rewards  # contrast: the advantages are not all zero
    if policy == "per_role":  # each actor learns from its own rows only: the two models part at the first step
        # whose batch carries a non-zero advantage (before it both moved by weight decay alone, identically)
        signal = [s for s in (1, 2) if any(any(r["advantage"]) for r in
                                            json.loads((first / "dump_batch" / f"step{s}.json").read_text()))]
        assert signal, "no step of the first job had a non-zero advantage"
        act, reh = synced["act"][signal[0]], synced["rehearse"][signal[0]]
        assert any(not act[k].equal(reh[k]) for k in act), f"the Rehearse actor equals the Act actor after step " \
                                                            f"{signal[0]}, the first with non-zero advantages"

    # 3. resume: the second job loaded step 2 (its first sync holds step 2's weights) and trained step 3 only
    assert "step:3 " in runs["resumed"] and "step:1 " not in runs["resumed"] and "step:2 " not in runs["resumed"]
    for role in roles:
        _check_server_equals_actor(resumed / "dump", ckpt, [2, 3], role)
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"

    # 4. envace's per-role metrics reached MLflow through verl's logger
    import mlflow

    client = mlflow.MlflowClient(mlflow_uri)
    exp = client.get_experiment_by_name("envace")
    mruns = client.search_runs([exp.experiment_id])
    history = {k: sorted(m.step for r in mruns for m in client.get_metric_history(r.info.run_id, k))
               for k in ("envace/advantage/act/abs_mean", "envace/advantage/rehearse/abs_mean",
                         "envace/rows/rehearse", "envace/episodes/unscored_share")}
    for key in history:
        assert history[key] == [1, 2, 3], history

    # 5. verl's merger on each role's actor, then envace eval on the merged Act model
    for role in roles:
        actor_dir = STACKS[role][1]
        merged = tmp_path / f"merged_{actor_dir}"
        out = subprocess.run([sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir",
                              str(ckpt / "global_step_3" / actor_dir), "--target_dir", str(merged)], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert out.returncode == 0, out.stderr[-3000:]
        merged_w = load_file(str(merged / "model.safetensors"))
        actor3 = _ckpt_weights(ckpt, 3, actor_dir)
        assert set(merged_w) <= set(actor3) and "model.embed_tokens.weight" in merged_w  # lm_head is tied
        assert all(merged_w[k].float().equal(actor3[k].to(merged_w[k].dtype).float()) for k in merged_w)
    ev = subprocess.run([sys.executable, "-m", "envace.cli", "eval", str(tmp_path / "merged_actor"), "--benchmarks",
                         "bfcl", "bench.bfcl_categories=[simple_python]", "bench_limit=2", "-k", "1",
                         "policy.max_tokens=8", "device=cpu", "threads=1", f"out_dir={tmp_path / 'eval'}"],
                        cwd=tmp_path, capture_output=True, text=True, timeout=300,
                        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert ev.stdout.splitlines()[1].split()[:2] == ["bfcl", "overall"], ev.stdout
    print(f"{policy}: rows per step {counts}; server == FSDP actor per role {roles} at steps 0..3; resumed at "
          f"step 3; eval: {ev.stdout.splitlines()[1]}")
