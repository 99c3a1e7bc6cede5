"""Model slots: where one model role of an evaluation or a training run comes from.

A `ModelSlot` is either a local model directory, loaded and served in-process (no HTTP), or an
OpenAI-compatible endpoint (vLLM, `envace serve`, a hosted API): `base_url`, the served `model` name and
`api_key_env`, the NAME of the environment variable that holds the key. The key itself is read when the
client is built and is never stored in a config, a result file, MLflow or a log; `describe()` (what
results record beside each score) holds names and URLs only.

Used for the three roles of `envace eval` (policy, user simulator, judge) and for the embedded trainer's
LLM checklist judge. From one slot:
- `build_policy(field)` -> a `BenchPolicy` (`HFChatPolicy` over a `LocalChatModel`, or `OpenAIPolicy`);
- `build_judge(field)` -> a judge backend with `complete(messages, *, json_schema, temperature) -> str`
  (and `chat(...)`, the `envace.rewards.ChatBackend` shape), for Vita's rubric judge and the checklist judge.
`field` is the config field the slot sits in (e.g. "judge"), so every error names it and the fix.
Local slots built with the same `SlotCache` share one loaded model (policy and user simulator on one dir
load it once), each role with its own policy object and sampling settings.

Context guard: every local slot refuses a prompt longer than its limit (`max_model_len`, default the
model's own max_position_embeddings, as `envace serve`) with `ContextLengthExceeded`, which the
benchmark records as that task's error (termination `context`); nothing is truncated.

Departure from vLLM serving: a local slot has no constrained decoding; `json_schema` is an instruction
in the prompt (see envace.engines.chat_model).
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from envace.config import BaseConfig, ConfigError


class SlotKind(str, Enum):
    LOCAL = "local"
    ENDPOINT = "endpoint"


def resolve_model_dir(path: str | Path) -> Path:
    """A model dir, or a `step_*` checkpoint dir (its `policy/` or `act/` model)."""
    p = Path(path).expanduser()
    for sub in ("policy", "act"):
        if (p / sub / "config.json").is_file():
            return p / sub
    return p


class ModelSlot(BaseConfig):
    """One model role: `model_dir` (local, in-process) or `base_url` + `model` (+ `api_key_env`)."""

    model_dir: str | None = Field(None, description="Local HF model dir or step_* checkpoint dir, served in-process.")
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint, e.g. http://host:8000/v1.")
    model: str | None = Field(None, description="Served model name at base_url (vllm --served-model-name).")
    api_key_env: str | None = Field(None, description="NAME of the environment variable holding the API key "
                                    "(the key itself is never stored); None: no key.")
    temperature: float = Field(0.0, ge=0.0, le=10.0, description="Sampling temperature of this role.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus mass of this role.")
    max_tokens: int | None = Field(None, ge=1,
                                   description="Most tokens per reply; None: the server's / engine's default.")
    max_model_len: int | None = Field(None, ge=1, description="Local: prompt + completion tokens per request "
                                      "(None: the model's max_position_embeddings, as envace serve); a longer "
                                      "prompt is that task's error. Endpoint: the server's own limit applies.")
    timeout_s: float = Field(120.0, gt=0, description="Endpoint: per-request timeout in seconds.")
    max_retries: int = Field(4, ge=0, description="Endpoint: transport retries per request.")

    @model_validator(mode="after")
    def _one_source(self) -> ModelSlot:
        if self.model_dir and self.base_url:
            raise ValueError(f"set either model_dir ({self.model_dir!r}) or base_url ({self.base_url!r}), not both: "
                             "a slot is a local model dir OR an OpenAI-compatible endpoint")
        if not self.model_dir and not self.base_url:
            raise ValueError("a model slot needs model_dir=<local model dir> or base_url=<endpoint> with model=<name>")
        if self.base_url and not self.model:
            raise ValueError(f"endpoint {self.base_url!r} needs model=<served model name> (what the server's "
                             "/v1/models lists)")
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url {self.base_url!r} must start with http:// or https://")
        if self.base_url and self.max_model_len is not None:
            raise ValueError(f"max_model_len={self.max_model_len} applies to a local model dir; endpoint "
                             f"{self.base_url!r} enforces its own limit (envace serve --max-model-len, vllm "
                             "--max-model-len): drop max_model_len")
        if self.api_key_env is not None and (not self.api_key_env or not _is_env_name(self.api_key_env)):
            raise ValueError(f"api_key_env {self.api_key_env!r} must be the NAME of an environment variable "
                             "(e.g. OPENAI_API_KEY), not the key itself")
        return self

    @classmethod
    def local(cls, model_dir: str | Path, **kw: Any) -> ModelSlot:
        return cls(model_dir=str(model_dir), **kw)

    @classmethod
    def endpoint(cls, base_url: str, model: str, api_key_env: str | None = None, **kw: Any) -> ModelSlot:
        return cls(base_url=base_url, model=model, api_key_env=api_key_env, **kw)

    @property
    def kind(self) -> SlotKind:
        return SlotKind.LOCAL if self.model_dir else SlotKind.ENDPOINT

    def label(self) -> str:
        """Human-readable name: the model dir's name, or `model @ base_url` (no key)."""
        from envace.secrets import mask_text

        if self.kind is SlotKind.LOCAL:
            return f"{resolve_model_dir(self.model_dir).name} (local)"  # type: ignore[arg-type]
        return f"{self.model} @ {mask_text(self.base_url or '')}"

    def describe(self) -> dict[str, Any]:
        """What results record about this slot: kind, dir or URL + model name, sampling; never a key."""
        from envace.secrets import mask_text

        if self.kind is SlotKind.LOCAL:
            out: dict[str, Any] = {"kind": "local", "model_dir": str(resolve_model_dir(self.model_dir))}  # type: ignore[arg-type]
        else:
            out = {"kind": "endpoint", "base_url": mask_text(self.base_url or ""), "model": self.model,
                   "api_key_env": self.api_key_env}
        out.update(name=self.label(), temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens)
        return out

    # -- checks (before anything is loaded) --------------------------------------------------------
    def check(self, field: str) -> None:
        """Raise ConfigError naming `field` and the fix when the slot cannot be used here: a local dir
        that is not a model dir, or an unset API-key variable."""
        from envace.models.loading import ModelDirError, check_model_dir

        if self.kind is SlotKind.LOCAL:
            try:
                check_model_dir(resolve_model_dir(self.model_dir))  # type: ignore[arg-type]
            except ModelDirError as exc:
                raise ConfigError(f"{field}.model_dir: {exc.what}; {exc.fix}", field=f"{field}.model_dir",
                                  what=exc.what, fix=f"set {field}.model_dir=<model dir>; {exc.fix}") from None
        elif self.api_key_env and not os.environ.get(self.api_key_env):
            what = f"environment variable {self.api_key_env} (the API key of {field}) is not set"
            fix = (f"export {self.api_key_env}=<key>, or set {field}.api_key_env=null for an endpoint "
                   "without a key")
            raise ConfigError(f"{field}.api_key_env: {what}; {fix}", field=f"{field}.api_key_env", what=what, fix=fix)

    # -- builders ----------------------------------------------------------------------------------
    def build_client(self, field: str = "model", transport: Any = None) -> Any:
        """An `OpenAIChatClient` for an endpoint slot (the key read from the environment now)."""
        from envace.engines.openai_client import OpenAIChatClient

        if self.kind is not SlotKind.ENDPOINT:
            raise ConfigError(f"{field} is a local model dir, not an endpoint; build_policy/build_judge serve it "
                              "in-process", field=field)
        self.check(field)
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return OpenAIChatClient(self.base_url or "", self.model or "", api_key=key, timeout=self.timeout_s,
                                max_retries=self.max_retries, transport=transport)

    def build_chat_model(self, field: str = "model", *, device: str | None = None,
                         cache: SlotCache | None = None) -> Any:
        """The `LocalChatModel` of a local slot (shared through `cache` between slots on the same dir)."""
        if self.kind is not SlotKind.LOCAL:
            raise ConfigError(f"{field} is an endpoint, not a local model dir", field=field)
        self.check(field)
        return (cache or SlotCache(device)).chat_model(resolve_model_dir(self.model_dir))  # type: ignore[arg-type]

    def build_policy(self, field: str = "policy", *, device: str | None = None, cache: SlotCache | None = None,
                     transport: Any = None) -> Any:
        """A `BenchPolicy` for this slot: `HFChatPolicy` (local) or `OpenAIPolicy` (endpoint)."""
        if self.kind is SlotKind.LOCAL:
            from envace.engines.chat_model import HFChatPolicy

            return HFChatPolicy(self.build_chat_model(field, device=device, cache=cache), temperature=self.temperature,
                                top_p=self.top_p, max_tokens=self.max_tokens, name=self.label(),
                                max_model_len=self.max_model_len)
        from envace.engines.openai_client import OpenAIPolicy

        return OpenAIPolicy(self.build_client(field, transport), temperature=self.temperature, top_p=self.top_p,
                            max_tokens=self.max_tokens, name=self.label())

    def build_judge(self, field: str = "judge", *, device: str | None = None, cache: SlotCache | None = None,
                    transport: Any = None) -> Any:
        """A judge backend: `complete(messages, *, json_schema, temperature) -> str` and `chat(...)`."""
        if self.kind is SlotKind.LOCAL:
            return LocalJudgeBackend(self.build_chat_model(field, device=device, cache=cache), self)
        return EndpointJudgeBackend(self.build_client(field, transport), self)


def _is_env_name(name: str) -> bool:
    return name.replace("_", "a").isalnum() and not name[0].isdigit()


class SlotCache:
    """Loaded local models by directory, so two slots on one dir share one engine."""

    def __init__(self, device: str | None = None) -> None:
        self.device = device
        self._models: dict[str, Any] = {}

    def chat_model(self, model_dir: Path) -> Any:
        key = str(Path(model_dir).resolve())
        if key not in self._models:
            from envace.engines.chat_model import LocalChatModel
            from envace.engines.factory import make_engine
            from envace.models.loading import load_policy, pick_device

            device = self.device or str(pick_device())
            model, tok = load_policy(model_dir, device=device)
            # guarded by the model's own context length; a slot's max_model_len overrides it per request
            self._models[key] = LocalChatModel.guarded(make_engine(model, tok, device=device), Path(model_dir).name)
        return self._models[key]

    def put(self, model_dir: Path, chat_model: Any) -> None:
        """Register an already loaded model (e.g. the policy engine `envace eval` built) under its dir."""
        self._models[str(Path(model_dir).resolve())] = chat_model


class LocalJudgeBackend:
    """A judge on a local model: the reply text of one generation (reasoning split off)."""

    def __init__(self, model: Any, slot: ModelSlot) -> None:
        self.model, self.slot, self.name = model, slot, slot.label()

    def complete(self, messages: list[dict[str, Any]], *, json_schema: dict[str, Any] | None = None,
                 temperature: float = 0.0) -> str:
        choices, _ = self.model.generate(messages, temperature=temperature, top_p=self.slot.top_p,
                                         max_tokens=self.slot.max_tokens, json_schema=json_schema, parse_tools=False,
                                         max_model_len=self.slot.max_model_len)
        return choices[0].content.strip()

    def chat(self, messages: list[dict[str, Any]], *, json_schema: dict[str, Any] | None = None,
             temperature: float = 0.0) -> str:
        return self.complete(messages, json_schema=json_schema, temperature=temperature)


class EndpointJudgeBackend:
    """A judge on an endpoint (`OpenAIChatClient.complete`)."""

    def __init__(self, client: Any, slot: ModelSlot) -> None:
        self.client, self.slot, self.name = client, slot, slot.label()

    def complete(self, messages: list[dict[str, Any]], *, json_schema: dict[str, Any] | None = None,
                 temperature: float = 0.0) -> str:
        from envace.toolcall import strip_think

        # the slot's top_p / max_tokens apply as for a local judge (OpenAIChatClient.complete sends neither)
        result = self.client.chat(messages, json_schema=json_schema, temperature=temperature, top_p=self.slot.top_p,
                                  max_tokens=self.slot.max_tokens)
        return strip_think(result.text).strip()

    def chat(self, messages: list[dict[str, Any]], *, json_schema: dict[str, Any] | None = None,
             temperature: float = 0.0) -> str:
        return self.complete(messages, json_schema=json_schema, temperature=temperature)
