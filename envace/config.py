"""Validated configs, one per entry point, loaded from YAML with `key=value` overrides.

Every field carries a one-line description. Validation happens at construction: a bad value raises a
`ConfigError` (a `ValueError`) naming the field, the value and the fix. The resolved config is saved
beside every run (`save_resolved`). Configs are pydantic models; overrides are merged with OmegaConf so
`a.b=3` and `roles.act.temperature=0.7` work on nested sections.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envace.input_budget import YAML_BYTES, YAML_VALUES, BudgetError
from envace.untrusted import short as _short_text
from envace.yaml_bounds import YamlLimitError, compose_bounded, interpolated_size

C = TypeVar("C", bound="BaseConfig")


class ConfigError(ValueError):
    """A config value is invalid; the message names the field, the value and the fix. `field` (dotted
    key), `what` and `fix` describe the first problem on their own, for one-line CLI errors."""

    def __init__(self, message: str, *, field: str | None = None, what: str | None = None,
                 fix: str | None = None) -> None:
        super().__init__(message)
        self.field, self.what, self.fix = field, what, fix


def flatten(mapping: Mapping[str, Any], sep: str = ".", prefix: str = "") -> dict[str, Any]:
    """The leaves of a nested mapping under joined keys: {"a": {"b": 1}} -> {"a.b": 1}. An empty mapping is
    kept as a leaf, so no key is lost. The one flattener of configs, MLflow params, eval metrics (sep="/")
    and the dashboard's config diff."""
    out: dict[str, Any] = {}
    for k, v in mapping.items():
        key = f"{prefix}{sep}{k}" if prefix else str(k)
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, sep, key))
        else:
            out[key] = v
    return out


class BaseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_enum_values=False)
    # top-level keys a config no longer has -> the key that holds their value now (load_config names it)
    retired_keys: ClassVar[dict[str, str]] = {}

    def flat(self) -> dict[str, Any]:
        """Dotted-key view of the resolved config (for MLflow params)."""
        return flatten(self.model_dump(mode="json"))

    def save_resolved(self, directory: str | Path, name: str = "config.yaml") -> Path:
        path = Path(directory) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        from envace.secrets import mask_secrets  # URL passwords are kept in memory only, never written

        path.write_text(yaml.safe_dump(mask_secrets(self.model_dump(mode="json")), sort_keys=False))
        return path

    def digest(self) -> str:
        import hashlib

        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]


def _explain(exc: ValidationError, cls: type[BaseModel], source: str) -> ConfigError:
    lines, first = [], None
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        value = err.get("input")
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            fix = f"remove it or check the spelling; valid keys are listed in {cls.__name__}"
            short = f"drop {loc} or check its spelling (--help lists the options)"
        elif err["type"] == "missing":
            fix = "set a value that satisfies the constraint"
            short = f"pass {loc}=<value>"
        else:
            fix = "set a value that satisfies the constraint"
            short = f"pass {loc}=<a valid value>"
        shown = "missing" if err["type"] == "missing" else _short_text(repr(value), 120)  # values may be megabytes
        lines.append(f"{source}: field '{loc}' = {shown}: {msg}; {fix}")
        if first is None:
            first = (loc, f"{loc} = {shown}: {msg}", short)
    loc, what, short = first or ("<root>", "invalid config", "check the config")
    if len(lines) > 1:
        what += f" (and {len(lines) - 1} more problem(s))"
    return ConfigError("\n".join(lines), field=loc if source == "defaults" else f"{source}: {loc}", what=what,
                       fix=short)


def override_example(cls: type[BaseModel]) -> str:
    """A `key=value` override that `cls` accepts (its first scalar field at its default), for hints."""
    for name, info in cls.model_fields.items():
        default = info.get_default(call_default_factory=True)
        if isinstance(default, bool):
            return f"{name}={str(default).lower()}"
        if isinstance(default, (int, float)):
            return f"{name}={default}"
    return "seed=0"


def parse_overrides(overrides: list[str] | tuple[str, ...], example: str = "seed=0") -> dict[str, Any]:
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value; write e.g. {example}", field=item,
                              what=f"override {item!r} is not key=value", fix=f"write key=value, e.g. {example}")
    _check_override_values(overrides)
    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist(list(overrides)), resolve=False)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise _omegaconf_error(exc, "overrides") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"overrides: not valid YAML: {' '.join(str(exc).split())}; fix the value",
                          field="overrides", what="an override value is not valid YAML", fix="fix the value") from None


def _omegaconf_error(exc: OmegaConfBaseException, source: str) -> ConfigError:
    """An OmegaConf parse or `${...}` interpolation error as a ConfigError naming the key."""
    key = getattr(exc, "full_key", None) or "<overrides>"
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    fix = f"write {key}=<value> literally, or point the ${{...}} at a key that exists"
    return ConfigError(f"{source}: field '{key}': {msg}; {fix}", field=key, what=msg, fix=fix)


MAX_YAML_BYTES = YAML_BYTES.default  # the defaults; ENVACE_MAX_YAML_* change them (envace.input_budget)
MAX_YAML_VALUES = YAML_VALUES.default


def _limit_error(exc: YamlLimitError | BudgetError) -> ConfigError:
    return ConfigError(str(exc), field=exc.where, what=exc.what, fix=exc.fix)


def _bounded_value(text: str, source: str) -> Any:
    """`text` as one YAML document through the bounded loader (envace.yaml_bounds); raises ConfigError."""
    try:
        loader, node = compose_bounded(text, source)
    except YamlLimitError as exc:
        raise _limit_error(exc) from None
    try:
        return None if node is None else loader.construct_document(node)
    except YamlLimitError as exc:
        raise _limit_error(exc) from None
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> Any:
    """The YAML document at `path`, bounded (envace.yaml_bounds, limits in envace.input_budget): its size in
    bytes, its values and string characters once aliases are expanded, no duplicate keys. Anything else is
    a one-line ConfigError naming the file and the fix."""
    p = Path(path)
    size = p.stat().st_size
    try:
        YAML_BYTES.check(size, str(p), "the config file is", "check that this is the config file")
    except BudgetError as exc:
        raise _limit_error(exc) from None
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    try:
        return _bounded_value(text, str(p))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {' '.join(str(exc).split())}; fix the syntax") from None
    except RecursionError:
        raise ConfigError(f"{p}: nested too deeply to read; flatten the file") from None


def _check_override_values(overrides: list[str] | tuple[str, ...]) -> None:
    """Each override's value through the same bounded loader as a file (an alias bomb fits in one
    argument), before OmegaConf parses and expands it. Syntax errors are left to OmegaConf's message."""
    for item in overrides:
        key, _, value = item.partition("=")
        try:
            _bounded_value(value, f"override {key}")
        except yaml.YAMLError:
            continue
        except RecursionError:
            raise ConfigError(f"override {key}: nested too deeply to read; flatten the value", field=key,
                              what="nested too deeply", fix="flatten the value") from None


def load_config(cls: type[C], path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (),
                **values: Any) -> C:
    """Build `cls` from a YAML file (optional), then `key=value` overrides, then keyword values."""
    base = OmegaConf.create({})
    source = "defaults"
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist; pass a YAML path (see configs/)")
        loaded = load_yaml(p) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: top level must be a mapping, got {type(loaded).__name__}")
        base = OmegaConf.create(loaded)
        source = str(p)
    try:
        merged = OmegaConf.merge(base, OmegaConf.create(parse_overrides(overrides, override_example(cls))),
                                 OmegaConf.create(values))
        interpolated_size(OmegaConf.to_container(merged, resolve=False), source)  # bounded before resolving
        data = OmegaConf.to_container(merged, resolve=True)
    except OmegaConfBaseException as exc:
        raise _omegaconf_error(exc, source) from None
    except YamlLimitError as exc:
        raise _limit_error(exc) from None
    for old, new in cls.retired_keys.items():
        if isinstance(data, dict) and old in data:
            where, fix = ("" if source == "defaults" else f"{source}: "), f"write {new}={data[old]} instead"
            raise ConfigError(f"{where}{old} is now {new}; {fix}", field=f"{where}{old}", what=f"{old} is now {new}",
                              fix=fix)
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, cls, source) from None


# ----- shared sections -------------------------------------------------------------------------


class SamplingConfig(BaseConfig):
    temperature: float = Field(1.0, ge=0.0, le=10.0, description="Sampling temperature; 0 means greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(64, ge=1, description="Most tokens one generation may write.")


class EpisodeRules(BaseConfig):
    """What ends an episode: one switch per rule, read by the embedded rollout and by the verl agent loop
    (the rollout contract, envace.rollout.machine and docs/rollout.md). The defaults treat every mode
    alike, so EnvACE (rehearse) and real-environment GRPO (env) differ only in who writes the observation;
    the reference code's per-mode rules are `invalid_call=end` (rehearse only), `error_observation=
    end_rehearsed`, `rehearse_context=rehearse_only`."""

    invalid_call: Literal["observe", "end"] = Field(
        "observe", description="A malformed Act call: observe = an error tool message, Act may retry; end = the "
                               "episode ends INVALID_TOOL_CALL. The same in every mode.")
    error_observation: Literal["continue", "end", "end_rehearsed"] = Field(
        "continue", description="An observation that is an error (envace.execution_result.is_error_value: the "
                                "world's {error} or a rehearsed error_tool_call, whoever wrote it): continue = Act "
                                "sees it and goes on; end = the episode ends ERROR_OBSERVATION in every mode; "
                                "end_rehearsed = the reference's rule, a rehearsed error ends (REHEARSE_ERROR), a "
                                "real one never does.")
    rehearse_parse_failure: Literal["end", "observe"] = Field(
        "end", description="Rehearse (or the simulator) wrote no parseable result: end = REHEARSE_ERROR; observe = "
                           "Act sees the parser's error object. A real environment always answers, so this rule "
                           "has no env-mode counterpart.")
    rehearse_context: Literal["every_mode", "rehearse_only"] = Field(
        "every_mode", description="The Rehearse prompt of each call counts against max_context_tokens in every "
                                  "mode (env mode builds and measures it without generating), so the context "
                                  "limit cuts the same episodes; rehearse_only = only where Rehearse generates "
                                  "(the reference).")

    def rule_values(self) -> dict[str, Any]:
        """The rule switches alone (to copy them into a RolloutConfig)."""
        return {name: getattr(self, name) for name in EpisodeRules.model_fields}


class RolloutConfig(EpisodeRules):
    """Rollout mode, role sampling and limits; the episode-ending rules are the inherited EpisodeRules."""

    mode: Literal["rehearse", "env", "simulator"] = Field(
        "rehearse", description="Observation source: rehearse (EnvACE), env (real GRPO), simulator (act-only).")
    act: SamplingConfig = Field(default_factory=lambda: SamplingConfig(max_new_tokens=64),
                                description="Sampling for the Act role.")
    rehearse: SamplingConfig = Field(default_factory=lambda: SamplingConfig(max_new_tokens=48),
                                     description="Sampling for the Rehearse role.")
    max_assistant_turns: int = Field(8, ge=1, description="Act generations per episode before MAX_TURNS.")
    max_calls_per_turn: int = Field(6, ge=1, description="Tool calls per user turn before MAX_CALLS.")
    max_context_tokens: int = Field(1024, ge=32, description="Prompt + response limit before CONTEXT_LIMIT.")
    few_shot: bool = Field(True, description="Show the task's reference (call, response) pairs to Rehearse.")
    rehearse_style: Literal["history", "compact", "full"] = Field(
        "history", description="Rehearse prompt: history (default; same-tool few-shot + transcript h_t + call a_t, as "
                               "the paper's π(·|h_t,a_t)), compact (ablation: no transcript) or full (real models).")
    simulator_model: str | None = Field(None, description="Model dir of the frozen simulator (mode=simulator).")
    simulator_prompt: Literal["rehearse", "prompted"] = Field(
        "rehearse", description="How the frozen simulator (mode=simulator) is prompted and read: rehearse (envace's "
                                "Rehearse prompt of rehearse_style and its strict parser, for a model trained on it) "
                                "or prompted (envace.roles.prompted_simulator: a plain-JSON tool prompt and a lenient "
                                "parser, for any chat model).")
