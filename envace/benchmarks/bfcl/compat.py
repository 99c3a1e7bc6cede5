"""Import BFCL's own code (`bfcl-eval`) without its heavy dependency pins.

What we use from `bfcl_eval` (nothing of its logic is re-implemented): the data loaders (`utils`), the
OpenAI-compatible FC handler's tool compilation, decoding and multi-turn inference loop (`BaseHandler`,
`OpenAICompletionsHandler`), the per-entry evaluators of `eval_checker.eval_runner` (which call
`ast_checker` and `multi_turn_checker`), the multi-turn backends, and the score helpers of
`eval_runner_helper`.

Two adjustments, both made only here:
1. `bfcl_eval.constants.eval_config` creates `result/`, `score/` and `.file_locks/` under
   `BFCL_PROJECT_ROOT` at import (by default inside site-packages); we point that variable at a scratch
   directory unless the user set it.
2. `bfcl_eval.constants.model_config` imports every provider SDK (anthropic, cohere, mistralai,
   google-genai, qwen-agent, writer-sdk, boto3, datamodel-code-generator) only to build its model registry.
   When those SDKs are absent we register a one-entry stand-in for that module: the `qwen3-8b-FC` entry
   (OpenAI-compatible FC, `underscore_to_dot=True`), the only entry the checkers consult. The checkers read
   nothing else from it. With the SDKs installed the real module is used.
"""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import types
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

TESTED_VERSION = "2026.3.23"
# The registry key whose settings match how we query models: OpenAI chat completions with tools.
CHECKER_MODEL = "qwen3-8b-FC"
INSTALL_HINT = (
    f"install BFCL's code and data with `pip install --no-deps bfcl-eval=={TESTED_VERSION}` plus what its "
    "checkers import: `pip install tree_sitter==0.21.3 tree-sitter-java==0.21.0 tree-sitter-javascript==0.21.4 "
    "tenacity overrides openai mpmath filelock python-dotenv tqdm rank-bm25`")


class BFCLUnavailable(ImportError):
    """bfcl-eval (or a package its checkers import) is missing; the message says what to install."""


@dataclass
class _StandInModelConfig:
    """Field-for-field copy of bfcl_eval's ModelConfig dataclass (the stand-in registry's record)."""

    model_name: str
    display_name: str
    url: str
    org: str
    license: str
    model_handler: Any
    input_price: float | None = None
    output_price: float | None = None
    is_fc_model: bool = True
    underscore_to_dot: bool = False


def _stand_in_model_config() -> types.ModuleType:
    mod = types.ModuleType("bfcl_eval.constants.model_config")
    mod.__doc__ = "envace stand-in: bfcl_eval's model registry without the provider SDK imports."
    mod.ModelConfig = _StandInModelConfig
    mod.MODEL_CONFIG_MAPPING = {CHECKER_MODEL: _StandInModelConfig(
        model_name="qwen3-8b", display_name="Qwen3-8B (FC)", url="https://huggingface.co/Qwen/Qwen3-8B",
        org="Qwen", license="apache-2.0", model_handler=None, is_fc_model=True, underscore_to_dot=True)}
    return mod


@dataclass
class BFCLModules:
    version: str
    utils: Any
    eval_runner: Any
    helper: Any  # eval_runner_helper
    handler_utils: Any  # model_handler.utils
    base_handler: Any
    openai_handler: Any  # model_handler.api_inference.openai_completion
    multi_turn_utils: Any
    enums: Any
    category_mapping: Any
    default_prompts: Any
    type_mappings: Any
    stand_in_model_registry: bool


@lru_cache(maxsize=1)
def load_bfcl() -> BFCLModules:
    """Import the pieces of bfcl_eval we use (once). Raises BFCLUnavailable with the install command."""
    try:
        from importlib.metadata import version

        bfcl_version = version("bfcl-eval")
    except Exception as exc:
        raise BFCLUnavailable(f"bfcl-eval is not installed; {INSTALL_HINT}") from exc
    root = Path(tempfile.gettempdir()) / "envace-bfcl-project-root"
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(root))
    stand_in = False
    try:
        importlib.import_module("bfcl_eval.constants.model_config")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] == "bfcl_eval":
            raise BFCLUnavailable(f"bfcl-eval looks incomplete ({exc}); {INSTALL_HINT}") from exc
        sys.modules["bfcl_eval.constants.model_config"] = _stand_in_model_config()
        stand_in = True
    try:
        mods = {name: importlib.import_module(f"bfcl_eval.{path}") for name, path in {
            "utils": "utils", "eval_runner": "eval_checker.eval_runner", "helper": "eval_checker.eval_runner_helper",
            "handler_utils": "model_handler.utils", "base_handler": "model_handler.base_handler",
            "openai_handler": "model_handler.api_inference.openai_completion",
            "multi_turn_utils": "eval_checker.multi_turn_eval.multi_turn_utils", "enums": "constants.enums",
            "category_mapping": "constants.category_mapping", "default_prompts": "constants.default_prompts",
            "type_mappings": "constants.type_mappings"}.items()}
    except ModuleNotFoundError as exc:
        raise BFCLUnavailable(f"a package BFCL's checkers import is missing ({exc.name}); {INSTALL_HINT}") from exc
    if CHECKER_MODEL not in mods["eval_runner"].MODEL_CONFIG_MAPPING:
        raise BFCLUnavailable(f"bfcl-eval {bfcl_version} has no {CHECKER_MODEL!r} model entry; "
                              f"envace was written against bfcl-eval=={TESTED_VERSION}")
    return BFCLModules(version=bfcl_version, stand_in_model_registry=stand_in, **mods)


def bfcl_available() -> tuple[bool, str]:
    """(True, version) or (False, how to install): for test skips and CLI messages."""
    try:
        return True, load_bfcl().version
    except BFCLUnavailable as exc:
        return False, str(exc)
