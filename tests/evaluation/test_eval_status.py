"""An evaluation's store run ends killed on SIGTERM: the SIGTERM raises while the eval
run is open, the writer commits what was evaluated, and the run is not left `running`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import sqlalchemy as sa

EVAL = textwrap.dedent("""
    import sys
    from envace.evaluation.config import EvalConfig
    from envace.evaluation.run import run_eval
    model, tmp = sys.argv[1], sys.argv[2]
    run_eval(EvalConfig.model_validate({
        "model": model, "n_tasks": 20, "k": 1, "seeds": list(range(500)), "fidelity": False, "device": "cpu",
        "threads": 1, "out_dir": tmp + "/eval",
        "rollout": {"max_assistant_turns": 1, "act": {"max_new_tokens": 8}, "rehearse": {"max_new_tokens": 8}},
        "tracking": {"enabled": True, "mlflow_uri": f"sqlite:///{tmp}/mlflow.db", "store_url": tmp + "/store.db"}}))
""")


def _runs(db) -> list[tuple[str, int]]:
    try:
        engine = sa.create_engine(f"sqlite:///{db}")
        try:
            with engine.connect() as c:
                return [tuple(r) for r in c.execute(sa.text(
                    "SELECT status, (SELECT count(*) FROM trajectories) FROM runs"))]
        finally:
            engine.dispose()
    except sa.exc.OperationalError:  # schema not there yet
        return []


def test_sigterm_during_an_evaluation_ends_its_store_run_killed(tmp_path):
    from envace.models.corpus import world_corpus
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    model = init_tiny_model(world_corpus(40, seed=0), tmp_path / "model", TinyModelConfig(
        hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, intermediate_size=64,
        vocab_size=400, seed=0))
    script = tmp_path / "eval.py"
    script.write_text(EVAL)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MLFLOW_ENABLE_TELEMETRY": "false", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(model), str(tmp_path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    store = tmp_path / "store.db"
    try:
        while not any(n > 0 for _status, n in _runs(store)):  # some seeds are evaluated and stored
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.1)  # the whole evaluation takes seconds: signal while it runs, not after
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    [(status, n)] = _runs(store)
    assert status == "killed" and 0 < n < 20 * 500  # stopped part-way
