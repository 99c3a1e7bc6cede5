"""The launcher's checks before `main_ppo` starts (envace/trainers/verl/preflight.py), each failure one line
naming the fix: a missing parquet, too few GPUs in the Ray cluster (a pure function of the per-node counts),
a dead judge (a closed port on 127.0.0.1) and a live one (a real HTTP server answering one chat
completion), an unset MLflow address; the one-node config; the environment the workers get (an
allowlist); the launch settings the checks stand beside (validation batches, checkpoint retention, the
empty-output penalty refused on verl)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envace.config import ConfigError, load_config
from envace.trainers.verl.config import LoopSettings, VerlLaunchConfig
from envace.trainers.verl.launcher import build_overrides, compose_verl_config, job_env, launch_verl
from envace.trainers.verl.preflight import gpu_problem, probe_endpoint

pytestmark = pytest.mark.verl

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "verl"
ONE_NODE = CONFIGS / "qwen3_8b_cm2_1node.yaml"
ENV = {"RAY_ADDRESS": "127.0.0.1:6379", "MLFLOW_TRACKING_URI": "http://mlflow:5000", "PATH": "/usr/bin"}


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def parquet(tmp_path):
    files = [tmp_path / "train.parquet", tmp_path / "val.parquet"]
    for f in files:
        f.write_bytes(b"PAR1")  # the preflight checks existence; verl reads the content
    return [str(f) for f in files]


@pytest.fixture
def judge():
    """A real HTTP server on 127.0.0.1 answering chat completions; records each request body."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            seen.append({"path": self.path, **json.loads(self.rfile.read(int(self.headers["Content-Length"])))})
            body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "OK"},
                                            "finish_reason": "length"}], "usage": {}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    finally:
        server.shutdown()
        server.server_close()


def _cfg(files, judge_url, **kw) -> VerlLaunchConfig:
    over = [f"train_files=[{files[0]}]", f"val_files=[{files[1]}]", f"loop.judge.base_url={judge_url}",
            *[f"{k}={v}" for k, v in kw.items()]]
    return load_config(VerlLaunchConfig, ONE_NODE, over)


def _never_asked(address):
    raise AssertionError("the GPU count is asked only after the cheaper checks pass")


def _one_line_error(cfg, environ=ENV, node_gpus=_never_asked) -> str:
    with pytest.raises(ConfigError) as err:
        launch_verl(cfg.model_copy(update={"python": "/nonexistent/python"}), environ=dict(environ),
                    node_gpus=node_gpus)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("verl preflight: ")
    return msg


def test_no_parquet(tmp_path, judge):
    missing = [str(tmp_path / "cm2_train.parquet"), str(tmp_path / "cm2_val.parquet")]
    msg = _one_line_error(_cfg(missing, judge[0]))
    assert f"train_files[0] = {missing[0]} is not a file here; write it with `envace data export" in msg
    assert f"val_files[0] = {missing[1]} is not a file here" in msg


def test_too_few_gpus(parquet, judge):
    # the paper's 2 x 8 layout on one 8-GPU node: what verl reports only after loading the data
    msg = gpu_problem([8], nnodes=2, per_node=8, address="10.0.0.1:6379")
    assert msg.startswith("the Ray cluster at 10.0.0.1:6379 has 8 GPUs (per node: 8); the config asks for nnodes 2 x "
                          "n_gpus_per_node 8 = 16 GPUs, 8 on each of 2 node(s)")
    assert "configs/verl/qwen3_8b_cm2_1node.yaml" in msg and "\n" not in msg
    assert gpu_problem([8], nnodes=1, per_node=8) is None
    assert gpu_problem([4, 4], nnodes=1, per_node=8) is not None  # 8 GPUs, but no node holds 8
    assert gpu_problem([16], nnodes=2, per_node=8) is None  # two 8-GPU groups fit one 16-GPU node
    assert gpu_problem([8, 8], nnodes=1, per_node=8, pools=2) is None  # per_role: a second pool
    assert gpu_problem([8], nnodes=1, per_node=8, pools=2) is not None
    assert gpu_problem([], nnodes=1, per_node=1) is not None  # a GPU-less cluster
    # through the launcher: the one-node config (4 GPUs for verl) against a Ray that sees 2
    asked = []
    msg = _one_line_error(_cfg(parquet, judge[0]), node_gpus=lambda address: asked.append(address) or [2])
    assert asked == ["127.0.0.1:6379"] and "has 2 GPUs (per node: 2)" in msg and "= 4 GPUs" in msg


def test_dead_judge(parquet):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    msg = _one_line_error(_cfg(parquet, url))
    assert f"loop.judge {url} (model Qwen3-30B-A3B) did not answer a probe chat completion (" in msg
    assert "fix loop.judge.base_url / loop.judge.model" in msg


def test_live_judge_and_the_launch(parquet, judge, tmp_path):
    url, seen = judge
    cfg = _cfg(parquet, url)
    assert probe_endpoint(cfg.loop.judge, "loop.judge", {}) is None
    assert seen[-1]["path"] == "/v1/chat/completions"
    assert seen[-1]["model"] == "Qwen3-30B-A3B" and seen[-1]["max_tokens"] == 1
    # every check passes: main_ppo starts (a stand-in interpreter records that it ran)
    record = tmp_path / "ran"
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\ntouch {record}\n")
    fake.chmod(0o755)
    launch_verl(cfg.model_copy(update={"python": str(fake)}), environ=dict(ENV), node_gpus=lambda address: [4])
    assert record.exists()


def test_mlflow_address_is_required(parquet, judge):
    msg = _one_line_error(_cfg(parquet, judge[0]), environ={k: v for k, v in ENV.items() if k != "MLFLOW_TRACKING_URI"})
    assert "MLFLOW_TRACKING_URI is unset: verl would log to sqlite:////tmp/mlruns.db" in msg
    # without mlflow among the loggers nothing is asked; the next check (data, judge, GPUs) decides
    no_mlflow = _cfg(parquet, f"http://127.0.0.1:{_closed_port()}/v1", loggers="[console]")
    assert "loop.judge" in _one_line_error(no_mlflow, environ={"RAY_ADDRESS": "x:1"})


def test_one_node_config_places_the_judge_outside_verls_pool():
    cfg = load_config(VerlLaunchConfig, ONE_NODE)
    assert (cfg.nnodes, cfg.n_gpus_per_node) == (1, 4)  # 4 of the node's 8 GPUs; the judge (TP 4) holds the rest
    assert cfg.loop.judge.base_url == "http://127.0.0.1:8000/v1" and cfg.loop.reward == "checklist_llm"
    text = ONE_NODE.read_text()
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve" in text and "--tensor-parallel-size 4" in text
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3 ray start --head" in text and "--num-gpus 4" in text
    composed = compose_verl_config(build_overrides(cfg))
    assert (composed.trainer.nnodes, composed.trainer.n_gpus_per_node) == (1, 4)
    assert composed.data.val_batch_size == 16 and composed.trainer.max_actor_ckpt_to_keep == 2


def test_settings_beside_the_checks():
    two = load_config(VerlLaunchConfig, CONFIGS / "qwen3_8b_cm2.yaml", ["val_batch_size=null",
                                                                        "max_checkpoints_kept=null"])
    composed = compose_verl_config(build_overrides(two))
    assert composed.data.val_batch_size == 16  # unset: the training batch, never the whole set
    assert composed.trainer.max_actor_ckpt_to_keep is None  # null keeps every save
    with pytest.raises((ConfigError, ValueError), match="empty_output_penalty=0.1: verl's V1 agent-loop adapter "
                                                        "copies an episode's last row reward"):
        LoopSettings(empty_output_penalty=0.1)
    with pytest.raises((ConfigError, ValueError), match="micro_batching=tokens with attn_implementation=sdpa"):
        load_config(VerlLaunchConfig, ONE_NODE, ["micro_batching=tokens"])


def test_workers_get_only_the_allowlisted_environment():
    cfg = load_config(VerlLaunchConfig, ONE_NODE, ["loop.judge.api_key_env=JUDGE_KEY", "forward_env=[HF_TOKEN]"])
    here = {"MLFLOW_TRACKING_URI": "http://mlflow:5000", "HF_HOME": "/cache/hf", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "HF_TOKEN": "hf_x", "HF_DATASETS_CACHE": "/d", "JUDGE_KEY": "k",
            "AWS_SECRET_ACCESS_KEY": "s", "PATH": "/usr/bin"}
    assert job_env(cfg, here) == {"VERL_USE_EXTERNAL_MODULES": "envace.trainers.verl_plugin",
                                  "MLFLOW_TRACKING_URI": "http://mlflow:5000", "HF_HOME": "/cache/hf",
                                  "JUDGE_KEY": "k", "HF_TOKEN": "hf_x"}
    # the envace command's own offline switches stay on this machine unless named
    plain = load_config(VerlLaunchConfig, ONE_NODE)
    assert set(job_env(plain, here)) == {"VERL_USE_EXTERNAL_MODULES", "MLFLOW_TRACKING_URI", "HF_HOME"}
