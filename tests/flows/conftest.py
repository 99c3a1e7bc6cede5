"""Fixtures of the flow tests: Prefect's real engine against a temporary server (its test harness,
started once per session), a tiny model, and sweep YAMLs whose cells are the real embedded trainer /
evaluator at toy sizes (hidden 32, one layer, 1 prompt x K=2, one step)."""

from __future__ import annotations

import os

for _k, _v in {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "300",
               "PREFECT_SERVER_UI_ENABLED": "false", "MLFLOW_ENABLE_TELEMETRY": "false", "DO_NOT_TRACK": "1",
               "DVC_NO_ANALYTICS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_k, _v)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

# Small enough that one training step + a 2-task evaluation take about a second on a busy CPU.
TOY_TRAIN = ["steps=1", "prompts_per_step=1", "k=2", "save_every=1", "data.n_tasks=10", "threads=1",
             "rollout.max_assistant_turns=2", "rollout.act.max_new_tokens=16", "rollout.rehearse.max_new_tokens=16"]
TOY_EVAL = ["n_tasks=2", "k=1", "fidelity=false", "threads=1", "rollout.max_assistant_turns=2",
            "rollout.act.max_new_tokens=16", "rollout.rehearse.max_new_tokens=16"]


@pytest.fixture(scope="session")
def prefect_harness():
    import torch
    from prefect.testing.utilities import prefect_test_harness

    torch.set_num_threads(1)
    with prefect_test_harness(server_startup_timeout=300):
        yield


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    out = tmp_path_factory.mktemp("model") / "tiny"
    cfg = TinyModelConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
                          intermediate_size=64, vocab_size=400)
    return init_tiny_model(world_corpus(50), out, cfg)


@pytest.fixture(scope="session")
def toy_eval() -> list[str]:
    return list(TOY_EVAL)


@pytest.fixture(scope="session")
def toy_train() -> list[str]:
    return list(TOY_TRAIN)


@pytest.fixture(scope="session")
def write_sweep(tiny_model):
    """write_sweep(dir, name, axes, **fields) -> path of a train sweep YAML over the toy trainer."""

    def write(directory: Path, name: str, axes: dict, **fields) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        spec = {"name": name, "kind": "train", "base": str(REPO / "configs/train/envace.yaml"),
                "overrides": [f"model={tiny_model}", *TOY_TRAIN], "axes": axes, "seeds": [0],
                "out_dir": str(directory / "sweep"), "mlflow_uri": f"sqlite:///{directory / 'mlflow.db'}",
                "experiment": "test-sweeps", "max_workers": 1, **fields}
        path = directory / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    return write


@pytest.fixture(scope="session")
def ray_head():
    """A real Ray head node (`ray start --head --block`: its own free ports, temp dir and auth token, no GPU)
    that this test session starts and stops; nothing of it may be left running."""
    from envace.cluster.ray_head import LocalRayHead

    head = LocalRayHead(num_cpus=2, env={"OMP_NUM_THREADS": "1"}).start()
    try:
        yield head
    finally:
        pgid = head.proc.pid
        head.stop()
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)


@pytest.fixture(scope="module")
def pinned_code_version():
    """Cached cells are keyed by the code version; pinned, so a test's own rerun is a cache hit whatever the
    working tree holds."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENVACE_CODE_VERSION", "pinned-for-test")
        yield


@pytest.fixture
def toy_sft() -> dict:
    """A sweep `sft:` entry at toy size (seconds to build): a one-layer tiny model, two steps."""
    return {"corpus_tasks": 12, "sft_tasks": 12, "steps": 2,
            "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "head_dim": 16,
                     "intermediate_size": 64, "vocab_size": 400}}
