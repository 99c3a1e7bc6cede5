"""Test-time rehearsal (TTS) settings: one `TTSConfig` for every entry point (`envace eval`'s `tts.*`, the TTS
sweep's axes `tts.n` / `tts.mode` / `tts.memory`, `envace tts diagnose`, the benchmarks' `TTSPolicy`).

N (private rehearsals before the one committed run; 0 is the plain run), the mode, the memory strategy and
the engine of the private phase's Rehearse calls (the policy, or the prompted simulator) live here with the
other knobs and are checked once, at construction: the bound on N is `MAX_N`, the strategies are the names
registered in envace.tts.strategies. `DEFAULT_N_GRID` / `DEMO_N_GRID` are the N lists of the TTS sweep flow
and of the demo.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import Field, field_validator

from envace.config import BaseConfig
from envace.tts.strategies import memory_strategy

MAX_N = 8
DEFAULT_N_GRID: tuple[int, ...] = (0, 1, 2, 3)  # the TTS sweep's N values (flows/tts_sweep.py, tts_sweep_config)
DEMO_N_GRID: tuple[int, ...] = (0, 2)  # the demo's short TTS table (envace.demo)
REHEARSE_AT: tuple[str, ...] = ("first", "every")


class TTSMode(str, Enum):
    """How the N private rehearsals relate: independent, or each seeing the earlier ones and their reviews."""

    PARALLEL = "parallel"
    SEQUENTIAL = "sequential"


TTS_MODES: tuple[str, ...] = tuple(m.value for m in TTSMode)


class TTSConfig(BaseConfig):
    """Test-time rehearsal: N private rehearsals, their reviews, a memory, then one committed run."""

    n: int = Field(0, description=f"Private rehearsals before the one committed run, 0..{MAX_N} (0 = the plain "
                                  "run, no rehearsal).")
    mode: TTSMode = Field(TTSMode.PARALLEL, description="parallel (independent rehearsals) | sequential (each sees "
                                                        "the earlier ones and their reviews).")
    memory: str = Field("prose", description="Memory strategy (envace.tts.strategies): prose (the policy's own "
                                             "notes), calls_results / calls (the best-reviewed rehearsal's calls "
                                             "[and results], verbatim), best_of_n (the committed run replays its "
                                             "first Act output).")
    explore_temperature: float = Field(
        1.0, ge=0.0, le=10.0, description="Temperature of the private rehearsals (Act and Rehearse) and reviews.")
    commit_temperature: float | None = Field(
        None, ge=0.0, le=10.0, description="Act temperature of the committed run; None: the rollout config's "
        "(so N = 0 is exactly the plain run).")
    rehearse_at: Literal["first", "every"] = Field(
        "first", description="Rehearse before the first user message only, or at every new user message "
        "(the memory is carried forward).")
    assess_max_tokens: int = Field(48, ge=1, description="Most tokens of one self-assessment.")
    memory_max_tokens: int = Field(64, ge=1, description="Cap of the rehearsal memory m_x, in tokens (words on a "
                                                         "chat-level engine, which has no tokenizer).")
    memory_words: int = Field(60, ge=1, description="Word budget the prose memory prompt asks for.")
    transcript_max_chars: int = Field(
        1200, ge=40, description="Each transcript shown to a review / memory prompt is cropped to this.")
    enable_thinking: bool = Field(False, description="Let the model think before reviews and the memory.")
    engine: Literal["policy", "simulator"] = Field(
        "policy", description="Who writes the private rehearsals' tool responses: policy (its own Rehearse role) or "
        "simulator (the prompted simulator, envace.roles.prompted_simulator, on the `simulator` model slot).")

    @field_validator("n", mode="before")
    @classmethod
    def _n(cls, v: Any) -> Any:
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_N:
            raise ValueError(f"tts n={v!r}: N counts private rehearsals before the one committed run (0 = the plain "
                             f"run); use 0..{MAX_N}")
        return v

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: str) -> str:
        memory_strategy(v)  # an unknown name raises, listing the known ones
        return v

    @property
    def on(self) -> bool:
        """Whether anything is rehearsed (N > 0)."""
        return self.n > 0

    def label(self) -> str:
        """A short name, e.g. `N=2, sequential, memory calls` (the memory only when not the default)."""
        memory = "" if self.memory == "prose" else f", memory {self.memory}"
        return f"N={self.n}, {self.mode.value}{memory}"

    def record(self) -> dict[str, Any]:
        """JSON-safe settings, for reports and stored results."""
        return self.model_dump(mode="json")
