"""verl plugin entry point: imported by `import verl` in every verl / Ray process, through
`VERL_USE_EXTERNAL_MODULES=envace.trainers.verl_plugin` (what `envace train --backend verl` puts in the
job's runtime env) or the `verl.plugins` entry point of pyproject.toml.

It imports the modules whose import registers envace with verl: the `envace_agent` agent loop, the
`envace_role_grpo` advantage estimator, the `envace` V1 trainer, the Rehearse rollout name
(rollout_names.py) and the fp32 temperature division of verl's FSDP engine (temperature.py). A piece
that fails to import raises `PluginImportError` naming the piece, the cause and the fix: a half-loaded
plugin would otherwise surface much later as verl's "Unknown trainer 'envace'" in some Ray worker.
(verl imports `VERL_USE_EXTERNAL_MODULES` unguarded, so the error stops that process at `import verl`;
verl's entry-point route catches plugin errors and logs them at debug level only, which is why the
launcher always sets the variable.)
"""

from __future__ import annotations

import importlib

from envace.trainers.verl.deps import INSTALL_GPU, INSTALL_VERL

PIECES = {
    "agent_loop": "envace.trainers.verl.agent_loop",
    "advantage": "envace.trainers.verl.advantage",
    "trainer": "envace.trainers.verl.trainer",
    "rollout_names": "envace.trainers.verl.rollout_names",
    "temperature": "envace.trainers.verl.temperature",
}
REGISTERED: list[str] = []


class PluginImportError(ImportError):
    """A piece of the envace verl plugin did not import; the message says which, why and how to fix it."""


def _load() -> None:
    for name, module in PIECES.items():
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise PluginImportError(
                f"envace verl plugin: {name} ({module}) did not import: {type(exc).__name__}: {exc}. Fix: install "
                f"the verl stack this envace expects ({INSTALL_VERL}; on GPU machines {INSTALL_GPU}), or unset "
                "VERL_USE_EXTERNAL_MODULES to run verl without envace") from exc
        REGISTERED.append(name)


_load()
