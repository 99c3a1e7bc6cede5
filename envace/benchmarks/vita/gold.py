"""VitaBench's gold replay: there is none. VitaBench scores rubrics with an LLM judge and ships no gold
actions, so nothing can be replayed; `envace eval --gold` lists it with that reason."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envace.benchmarks.base import GoldOutcome

NO_GOLD = "no gold replay: VitaBench scores rubrics with an LLM judge and ships no gold actions"


def gold_replay(options: Mapping[str, Any], paths: Mapping[str, str | None], limit: int | None,
                seed: int) -> GoldOutcome:
    return GoldOutcome("vita", 0, 0, note=NO_GOLD)
