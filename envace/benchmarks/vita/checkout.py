"""VitaBench's own code and prompts from a user's checkout (`<checkout>/src/vita`).

- Prompts: `src/vita/prompts/<name>.yaml` (keys `english` / `chinese`) are read as data: the agent system
  prompt (`agent_system_prompt`, with `{time}`), the user simulator's (`user_system_prompt`, with
  `{persona}` / `{instructions}`) and the judge's (`sliding_window_eval_template`). Missing files fall back
  to None (the caller uses its paraphrase and records the departure).
- Environments: each task embeds its DB. As VitaBench's `run_task`, the domain is the task set's
  (`data.set_domain`: the `--domain` VitaBench runs that set under, never the task's `domain` label):
  a single domain builds its registered environment, which VitaBench's registry maps to
  `vita.domains.<domain>.environment.get_environment(task.environment, language)` (imported directly:
  `vita.registry` would import VitaBench's agents and LLM client too); the merged cross domain builds
  `vita.environment.environment.get_cross_environment(domain, task.environment, language)`. Tool calls go
  through the environment's `get_response(vita.data_model.message.ToolCall)` (which turns tool
  exceptions into error results), tools are listed by `get_tools()` (`.openai_schema`).
Importing `vita` needs its dependencies (pydantic, loguru, pyyaml, pandas, thefuzz, holidays, json-repair,
requests, ...) and a `models.yaml`: `vita.config` raises at import without one, so a placeholder (no
models; envace never calls VitaBench's own LLM client) is written to a temp dir and named in
`VITA_MODEL_CONFIG_PATH` unless that is already set. VitaBench's loguru output is disabled.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from envace.benchmarks.vita.data import ENV_DOMAINS, VitaTask

PROMPTS = ("agent_system_prompt", "user_system_prompt", "sliding_window_eval_template")


class VitaUnavailable(ImportError):
    """VitaBench's code cannot be imported from the checkout; the message says why and how to fix it."""


def read_prompt(checkout: str | Path, name: str, language: str) -> str | None:
    path = Path(checkout) / "src" / "vita" / "prompts" / f"{name}.yaml"
    if not path.is_file():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    value = data.get(language)
    return value if isinstance(value, str) else None


@dataclass
class VitaCheckout:
    root: Path
    language: str  # "english" | "chinese"

    def prompt(self, name: str) -> str | None:
        return read_prompt(self.root, name, self.language)

    def _import(self, module: str) -> Any:
        src = self.root / "src"
        if not (src / "vita").is_dir():
            raise VitaUnavailable(f"{self.root}: no src/vita; pass the root of a clone of "
                                  f"github.com/meituan-longcat/vitabench")
        loaded = sys.modules.get("vita")
        if loaded is not None and not str(getattr(loaded, "__file__", "") or "").startswith(str(src)):
            raise VitaUnavailable(f"a different 'vita' is already imported ({getattr(loaded, '__file__', '?')}); "
                                  f"use the checkout at {self.root} in a fresh process")
        if "VITA_MODEL_CONFIG_PATH" not in os.environ:
            placeholder = Path(tempfile.mkdtemp(prefix="envace-vita-")) / "models.yaml"
            placeholder.write_text("default: {}\nmodels: []\n")
            os.environ["VITA_MODEL_CONFIG_PATH"] = str(placeholder)
        if str(src) not in sys.path:
            sys.path.insert(0, str(src))
        try:  # VitaBench logs every tool result at DEBUG level through loguru
            from loguru import logger

            logger.disable("vita")
        except ImportError:
            pass  # reported below as a missing VitaBench dependency
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # vita.config prints the models it found
                return importlib.import_module(module)
        except ImportError as exc:
            raise VitaUnavailable(f"cannot import {module} from {src}: {exc}; install VitaBench's dependencies "
                                  f"(pip install -e {self.root} --no-deps, then loguru thefuzz holidays "
                                  f"json-repair requests pandas)") from exc

    def environment(self, task: VitaTask) -> Any:
        names = task.domain.split(",")
        unknown = [n for n in names if n not in ENV_DOMAINS]
        if unknown:  # only registered names ever reach an import
            raise ValueError(f"task {task.id}: domain {task.domain!r} names no VitaBench environment "
                             f"({list(ENV_DOMAINS)}); resolve it from the task set (data.set_domain)")
        if len(names) > 1:
            return self._import("vita.environment.environment").get_cross_environment(
                task.domain, task.environment, self.language)
        return self._import(f"vita.domains.{names[0]}.environment").get_environment(task.environment, self.language)

    def tool_call(self, name: str, arguments: dict[str, Any], call_id: str) -> Any:
        return self._import("vita.data_model.message").ToolCall(id=call_id, name=name, arguments=arguments)
