"""Test-time rehearsal's settings surfaces (envace.tts.config): `tts.*` overrides of `envace eval`, the eval
CLI's `--tts-*` options, the retired keys' one-line errors, `envace tts diagnose`'s grid, and that reading the
config stays light (no torch)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from envace.config import ConfigError, load_config
from envace.evaluation.config import EvalConfig
from envace.evaluation.tts_diagnosis import TTSDiagnosisConfig, conditions
from envace.tts import TTSConfig, TTSMode


def test_overrides_reach_one_tts_config():
    cfg = load_config(EvalConfig, None, ["tts.n=2", "tts.mode=sequential", "tts.memory=calls", "tts.rehearse_at=every"],
                      model="m")
    assert (cfg.tts.n, cfg.tts.mode, cfg.tts.memory, cfg.tts.rehearse_at) == (2, TTSMode.SEQUENTIAL, "calls", "every")
    assert cfg.flat()["tts.mode"] == "sequential" and cfg.tts.label() == "N=2, sequential, memory calls"
    assert load_config(EvalConfig, None, [], model="m").tts == TTSConfig()  # default: off, prose


@pytest.mark.parametrize("override, new", [("tts_n=2", "tts.n=2"), ("tts_mode=sequential", "tts.mode=sequential")])
def test_a_retired_key_names_the_key_that_replaced_it(override, new, tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(EvalConfig, None, [override], model="m")
    old = override.split("=")[0]
    assert str(err.value) == f"{old} is now {new.split('=')[0]}; write {new} instead"
    assert err.value.field == old
    (tmp := tmp_path / "eval.yaml").write_text(f"{old}: {new.split('=')[1]}\n")
    with pytest.raises(ConfigError, match=f"^{tmp}: {old} is now"):  # from a file: the file is named
        load_config(EvalConfig, tmp, [], model="m")


def test_the_eval_options_fill_tts(monkeypatch):
    from typer.testing import CliRunner

    import envace.evaluation.run as run_module
    from envace.cli import app

    seen = []

    def fake_run_eval(cfg, echo=None):
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(run_module, "run_eval", fake_run_eval)
    CliRunner().invoke(app, ["eval", "m", "--tts-n", "3", "--tts-memory", "best_of_n", "tts.rehearse_at=every"])
    (cfg,) = seen
    assert (cfg.tts.n, cfg.tts.mode, cfg.tts.memory, cfg.tts.rehearse_at) == (3, TTSMode.PARALLEL, "best_of_n",
                                                                              "every")


def envace(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ENVACE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "envace.cli", *args], env=env, capture_output=True, text=True,
                          timeout=600)


def test_cli_errors_are_one_line(tmp_path):
    res = envace("eval", str(tmp_path), "--tts-memory", "notes")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "unknown TTS memory strategy 'notes'; valid names: best_of_n, calls, calls_results, prose" in res.stderr
    res = envace("eval", str(tmp_path), "tts_mode=sequential")
    assert res.returncode == 2
    assert res.stderr.strip() == ("error: tts_mode is now tts.mode (tts_mode): write tts.mode=sequential instead; "
                                  "see `envace eval --help`")


def test_diagnosis_grid_comes_from_its_own_keys():
    cfg = load_config(TTSDiagnosisConfig, None, ["n=[1]", "modes=[sequential]", "bound_mode=sequential",
                                                 "tts.memory=calls_results"], model="m")
    assert [(c.name, c.n, c.mode) for c in conditions(cfg)] == [
        ("N=0", 0, "parallel"), ("N=1 sequential", 1, "sequential"), ("oracle N=1 sequential", 1, "sequential"),
        ("placebo: empty note", 1, "sequential"), ("placebo: other note", 1, "sequential")]
    with pytest.raises(ConfigError, match=r"tts.n is set, but the diagnosis runs a grid: list the counts in n="):
        load_config(TTSDiagnosisConfig, None, ["tts.n=2"], model="m")
    with pytest.raises(ConfigError, match="tts.memory=best_of_n writes none; set placebo=false"):
        load_config(TTSDiagnosisConfig, None, ["tts.memory=best_of_n"], model="m")
    assert load_config(TTSDiagnosisConfig, None, ["tts.memory=best_of_n", "placebo=false"], model="m").oracle


def test_reading_the_config_loads_no_torch():
    code = "import sys, envace.tts.config, envace.evaluation.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "False", out.stderr[-2000:]
