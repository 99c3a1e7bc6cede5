"""Plugin loading: the `verl.plugins` entry point and the `VERL_USE_EXTERNAL_MODULES` route, each in a
fresh interpreter (the way a Ray worker imports verl), with a control run that loads neither."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.verl

PROBE = """
import json, sys, verl
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
print(json.dumps({"agent_loop": _agent_loop_registry.get("envace_agent"),
                  "estimator": "envace_role_grpo" in ADV_ESTIMATOR_REGISTRY,
                  "trainer": getattr(TRAINER_REGISTRY.get("envace"), "__name__", None),
                  "plugin_imported": "envace.trainers.verl_plugin" in sys.modules}))
"""


def probe(**env: str) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith("VERL_USE_EXTERNAL")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_entry_point_is_discovered():
    (ep,) = [e for e in importlib.metadata.entry_points(group="verl.plugins") if e.name == "envace"]
    assert ep.value == "envace.trainers.verl_plugin"
    module = ep.load()
    assert module.REGISTERED == ["agent_loop", "advantage", "trainer", "rollout_names", "temperature"]


@pytest.mark.slow
def test_external_modules_route_in_a_fresh_process():
    seen = probe(VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES="envace.trainers.verl_plugin")
    assert seen == {"agent_loop": {"_target_": "envace.trainers.verl.agent_loop.EnvaceAgentLoop"},
                    "estimator": True, "trainer": "EnvaceTrainer", "plugin_imported": True}


@pytest.mark.slow
def test_entry_point_route_and_control_in_fresh_processes():
    assert probe(VERL_USE_EXTERNAL_PLUGINS="auto")["trainer"] == "EnvaceTrainer"
    assert probe(VERL_USE_EXTERNAL_PLUGINS="none") == {"agent_loop": None, "estimator": False, "trainer": None,
                                                       "plugin_imported": False}


def test_plugin_import_errors_are_raised_with_the_fix(monkeypatch):
    from envace.trainers import verl_plugin

    monkeypatch.setattr(verl_plugin, "PIECES", {"missing": "envace.trainers.verl.no_such_module"})
    monkeypatch.setattr(verl_plugin, "REGISTERED", [])
    with pytest.raises(verl_plugin.PluginImportError, match=r"missing \(envace.trainers.verl.no_such_module\) did "
                       r"not import: ModuleNotFoundError.*Fix: install .*verl\[verl-core\]==0.9.1.*unset "
                       r"VERL_USE_EXTERNAL_MODULES") as err:
        verl_plugin._load()
    assert isinstance(err.value.__cause__, ModuleNotFoundError) and verl_plugin.REGISTERED == []


@pytest.mark.slow
def test_a_broken_piece_stops_import_verl_in_a_fresh_process(tmp_path):
    # the launcher's route (VERL_USE_EXTERNAL_MODULES): a piece that cannot import stops the process at
    # `import verl` with the fix, instead of a later "Unknown trainer 'envace'"
    broken = tmp_path / "envace_broken_piece.py"
    broken.write_text("raise ImportError('simulated missing dependency')\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from envace.trainers import verl_plugin as p; "
            "p.PIECES['broken'] = 'envace_broken_piece'; p.REGISTERED.clear(); p._load()")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert out.returncode == 1
    assert "PluginImportError: envace verl plugin: broken (envace_broken_piece) did not import" in out.stderr


def test_missing_extra_names_what_to_install():
    from envace.trainers.verl.deps import MissingExtra, require

    with pytest.raises(MissingExtra, match=r"pip install -r requirements/gpu-cluster.txt"):
        require("vllm")  # not installable on this CPU machine
    with pytest.raises(MissingExtra, match=r"verl\[verl-core\]==0.9.1"):
        require("verl.no_such_module")
