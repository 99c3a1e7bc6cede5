"""VitaBench tasks from a user's checkout of meituan-longcat/vitabench (not on PyPI).

Layout read: `<checkout>/data/vita/domains/<set>/tasks.json` (Chinese, the default) or `tasks_en.json`
(English), sets delivery / instore / ota / cross_domain (100 tasks each). A task:
`{id, domain?, instructions, user_scenario: {user_profile}, environment: {time, ...its own DB...},
message_history?, evaluation_criteria: {expected_states: [{state_rubrics, ...}], overall_rubrics}}`.
The rubrics are the state rubrics of every expected state then the overall rubrics, each kept once in
first-seen order (VitaBench's rubric-state initialisation).

Domains are resolved as VitaBench resolves them: its runner takes the domain from its command line
(`--domain delivery`; the default `delivery,instore,ota` selects the cross_domain task set) and looks
each name up in its registry of environments (delivery, instore, ota); the task file is chosen by task
set and language. A task's own `domain` field is a free-text label (real English instore tasks carry
"in-store consumption" or "in-store") and is never used to build an environment; it is kept as
`domain_label`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SETS = ("delivery", "instore", "ota", "cross_domain")
LANGUAGES = {"en": "english", "english": "english", "zh": "chinese", "chinese": "chinese"}
ENV_DOMAINS = ("delivery", "instore", "ota")  # the environments VitaBench's registry holds
CROSS_DOMAIN = ",".join(ENV_DOMAINS)  # VitaBench's default --domain: every environment merged
# The --domain VitaBench is run with for each task set (its cross_domain set runs under the merged domain).
SET_DOMAIN = {"delivery": "delivery", "instore": "instore", "ota": "ota", "cross_domain": CROSS_DOMAIN}


class VitaDataError(ValueError):
    """A VitaBench file or task is missing or malformed; the message names the file, task and field."""


@dataclass
class VitaTask:
    id: str
    set: str
    domain: str  # the environment domain(s) VitaBench runs the set under: a name, or "delivery,instore,ota"
    instructions: str
    persona: str
    environment: dict[str, Any]
    rubrics: list[str]
    message_history: list[dict[str, Any]] = field(default_factory=list)
    has_criteria: bool = True
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    domain_label: str = ""  # the task's own `domain` field (free text, never resolved)

    @property
    def time(self) -> str:
        return str(self.environment.get("time", ""))


def language_name(language: str) -> str:
    try:
        return LANGUAGES[language]
    except KeyError:
        raise VitaDataError(f"language {language!r} is not one of {sorted(LANGUAGES)}") from None


def set_domain(set_name: str) -> str:
    """The environment domain(s) of a task set, as VitaBench's `--domain` names them."""
    try:
        return SET_DOMAIN[set_name]
    except KeyError:
        raise VitaDataError(f"VitaBench set {set_name!r} is not one of {list(SETS)}") from None


def tasks_file(checkout: str | Path, set_name: str, language: str) -> Path:
    if set_name not in SETS:
        raise VitaDataError(f"VitaBench set {set_name!r} is not one of {list(SETS)}")
    name = "tasks_en.json" if language_name(language) == "english" else "tasks.json"
    return Path(checkout) / "data" / "vita" / "domains" / set_name / name


def rubrics_of(criteria: dict[str, Any] | None) -> list[str]:
    out: list[str] = []
    if not criteria:
        return out
    for state in criteria.get("expected_states") or []:
        for r in (state or {}).get("state_rubrics") or []:
            if r not in out:
                out.append(r)
    for r in criteria.get("overall_rubrics") or []:
        if r not in out:
            out.append(r)
    return out


def _task(where: str, set_name: str, raw: Any) -> VitaTask:
    if not isinstance(raw, dict):
        raise VitaDataError(f"{where}: a task must be an object")
    tid = str(raw.get("id", ""))
    where = f"{where} (id {tid or '?'})"
    if not tid:
        raise VitaDataError(f"{where}: field 'id' is missing")
    if not isinstance(raw.get("instructions"), str):
        raise VitaDataError(f"{where}: field 'instructions' (the user goal text) must be a string")
    env = raw.get("environment")
    if not isinstance(env, dict):
        raise VitaDataError(f"{where}: field 'environment' (the task's own DB, with 'time') must be an object")
    scenario = raw.get("user_scenario") or {}
    if not isinstance(scenario, dict):
        raise VitaDataError(f"{where}: field 'user_scenario' must be an object with 'user_profile'")
    criteria = raw.get("evaluation_criteria")
    if criteria is not None and not isinstance(criteria, dict):
        raise VitaDataError(f"{where}: field 'evaluation_criteria' must be an object")
    profile = scenario.get("user_profile", "")
    return VitaTask(id=tid, set=set_name, domain=set_domain(set_name), domain_label=str(raw.get("domain") or ""),
                    instructions=raw["instructions"],
                    persona=profile if isinstance(profile, str) else json.dumps(profile, ensure_ascii=False),
                    environment=env, rubrics=rubrics_of(criteria),
                    message_history=list(raw.get("message_history") or []),
                    has_criteria=criteria is not None, raw=raw)


@dataclass
class BadTask:
    """A task of the file that cannot be read: run as an error (adapter stage), never dropped silently."""

    id: str  # its `id` when it has one, else "#<index>"
    error: VitaDataError


def load_tasks(checkout: str | Path, set_name: str, language: str = "en") -> list[VitaTask]:
    """Every task of the set's file; the first malformed task raises (see `load_task_entries`)."""
    out = load_task_entries(checkout, set_name, language)
    bad = next((t for t in out if isinstance(t, BadTask)), None)
    if bad is not None:
        raise bad.error
    return out  # type: ignore[return-value]


def load_task_entries(checkout: str | Path, set_name: str, language: str = "en") -> list[VitaTask | BadTask]:
    """Every task of the set's file in order; a malformed task is a `BadTask` in its place (the file
    itself missing or not a JSON array raises)."""
    path = tasks_file(checkout, set_name, language)
    if not path.is_file():
        raise VitaDataError(f"{path}: not found; pass the root of a clone of github.com/meituan-longcat/vitabench "
                            f"(language {language!r} reads {path.name})")
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise VitaDataError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(items, list):
        raise VitaDataError(f"{path}: expected a JSON array of tasks")
    out: list[VitaTask | BadTask] = []
    for i, raw in enumerate(items):
        try:
            out.append(_task(f"{path} task {i}", set_name, raw))
        except VitaDataError as exc:
            tid = raw.get("id") if isinstance(raw, dict) else None
            out.append(BadTask(str(tid) if tid else f"#{i}", exc))
    return out
