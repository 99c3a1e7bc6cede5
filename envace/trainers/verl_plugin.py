"""verl plugin entry point: imported by `import verl` in every verl / Ray process, through the
`verl.plugins` entry point of pyproject.toml or `VERL_USE_EXTERNAL_MODULES=envace.trainers.verl_plugin`.

It only imports the modules whose import registers envace with verl: the `envace_agent` agent loop,
the `envace_role_grpo` advantage estimator and the `envace` V1 trainer. It must never raise — verl
imports `VERL_USE_EXTERNAL_MODULES` without a guard, so an exception here would break `import verl`
everywhere — so a piece whose optional dependency is missing (e.g. transfer_queue from
`verl[verl-core]`) is skipped with a warning naming what to install, and `REGISTERED` / `SKIPPED` say
what happened.
"""

from __future__ import annotations

import importlib
import logging

logger = logging.getLogger(__name__)

PIECES = {
    "agent_loop": "envace.trainers.verl.agent_loop",
    "advantage": "envace.trainers.verl.advantage",
    "trainer": "envace.trainers.verl.trainer",
}
REGISTERED: list[str] = []
SKIPPED: dict[str, str] = {}


def _load() -> None:
    for name, module in PIECES.items():
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - the plugin must not break `import verl`
            SKIPPED[name] = f"{type(exc).__name__}: {exc}"
            logger.warning("envace verl plugin: %s not registered (%s)", name, SKIPPED[name])
        else:
            REGISTERED.append(name)


_load()
