"""Rehearsal fidelity: how close a rehearsed tool result is to the real environment's answer.

Four scores per (call, rehearsed, real) pair:
- `json_valid`: the Rehearse parser (envace.execution_result, the ONE parser of the format, also used by
  the rollout) accepted the output as a result value: exactly one `<execution_result>` block holding a
  non-empty strict-JSON object or array; an `error_tool_call` result counts as valid (it is a value to
  compare). Prose around the block, bare JSON, scalars, `{}` / `null` and non-strict JSON are invalid,
  exactly where the rollout's observation is a parse error, so the store's `observation` and `rehearsed`
  columns cannot contradict each other. (An earlier lenient reading accepted bare JSON and text around
  the block; it is not kept as a metric.) When a turn's parsed observation is at hand it is used as is;
  the text is not parsed a second time;
- `schema_ok`: the rehearsed value validates against the tool's *result* schema when one is given
  (jsonschema); with no schema, it has the same shape as the real value (same keys, same JSON types,
  recursively; list elements compared as a set of shapes). OpenAI tool schemas describe arguments, not
  results, so the shape check is what applies on most data;
- `exact_match`: the two values are equal as JSON (1 == 1.0, but true != 1, unlike Python's `==`);
- `field_f1`: F1 between the multisets of flattened leaves `path=value` (path `("a", "b", 0, "c")` for
  `a.b[0].c`; an empty object or list is itself a leaf), so a result that gets 3 of 4 fields right
  scores between 0 and 1. Equal leaf multisets are exactly equal values, so exact_match comes free.

`turn_fidelity(turn)` is the verdict of one Rehearse turn: its stored observation (the rollout's parse)
against the agent-visible value of its real observation (`Observation.agent_value`: the content, or the
error object). The evaluation, the exploitation monitor and the store writer all take it from there.

Error prediction, apart from the four scores: did the rehearsed result say the call failed exactly when the
real environment did? Both sides are read with the one predicate `envace.execution_result.is_error_value`
(the world's `{"error": ...}` and a rehearsed `error_tool_call` alike); an unparseable rehearsal predicts no
error (it is a format failure, counted by `json_valid`). `turn_error_verdict` gives (predicted, real) for a
Rehearse turn, `aggregate_errors` per-tool precision / recall of "the real environment returned an error",
`error_metric_dict` the MLflow keys `<prefix>/<tool>/error_precision|error_recall|errors_real`.

A pure module: the evaluation code and the store writer both call it; `aggregate_by_tool` and
`fidelity_metric_dict` turn many pairs into per-tool metrics for MLflow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypedDict

from envace.execution_result import is_error_value, parse_execution_result
from envace.types import Observation, Role, Turn

try:  # a dependency of prefect and dvc-data; only a speed-up here
    import orjson
except ImportError:  # pragma: no cover
    orjson = None


class FidelityScores(TypedDict):
    json_valid: bool
    schema_ok: bool
    exact_match: bool
    field_f1: float


def parse_rehearsed(text: Any, observation: Observation | None = None) -> tuple[bool, Any]:
    """(valid, value) of a rehearsed result. Never raises: the text is model output.

    `observation`: the rollout's parse of the same text (`Turn.observation` of a Rehearse turn), used
    instead of parsing again; otherwise the text is parsed with `parse_execution_result`. Valid exactly
    when the parse produced a value (`content is not None`)."""
    obs = observation if observation is not None and observation.source is not Role.ENV \
        else parse_execution_result(text)
    if obs.content is None:
        return False, None
    return True, obs.content


def _scalar(v: Any) -> tuple:
    """Canonical leaf value: numbers compare by value (1 == 1.0), bools stay distinct from numbers."""
    t = type(v)  # exact-type fast paths for what parsed JSON holds; subclasses take the isinstance chain
    if t is str:
        return ("s", v)
    if t is int or t is float:
        return ("n", float(v))
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return ("n", float(v))
    if isinstance(v, str):
        return ("s", v)
    if v is None:
        return ("z",)
    if isinstance(v, dict):
        return ("o",)  # an empty object
    if isinstance(v, (list, tuple)):
        return ("a",)  # an empty array
    return ("?", repr(v))


def leaves(value: Any) -> dict[tuple, int]:
    """Multiset (leaf -> count) of `(path, canonical scalar)` leaves; a path is a tuple of keys (str) and
    indices (int), so two values are equal as JSON exactly when their leaf multisets are equal."""
    out: dict[tuple, int] = {}
    stack: list[tuple[tuple, Any]] = [((), value)]
    pop, push = stack.pop, stack.append
    while stack:
        path, v = pop()
        if isinstance(v, dict):
            if v:
                for k, x in v.items():
                    push(((*path, k if type(k) is str else str(k)), x))
                continue
        elif isinstance(v, (list, tuple)):
            if v:
                for i, x in enumerate(v):
                    push(((*path, i), x))
                continue
        leaf = (path, _scalar(v))
        out[leaf] = out.get(leaf, 0) + 1
    return out


def _f1(p: dict[tuple, int], g: dict[tuple, int]) -> float:
    tp = 0
    for k, n in p.items():
        m = g.get(k)
        if m is not None:
            tp += n if n < m else m
    if tp == 0:
        return 0.0
    precision, recall = tp / sum(p.values()), tp / sum(g.values())
    return 2 * precision * recall / (precision + recall)


def field_f1(pred: Any, gold: Any) -> float:
    return _f1(leaves(pred), leaves(gold))


def shape_of(v: Any) -> Any:
    t = type(v)  # exact-type fast paths, as in _scalar
    if t is str:
        return "string"
    if t is int or t is float:
        return "number"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if v is None:
        return "null"
    if isinstance(v, dict):
        return ("object", frozenset([(k if type(k) is str else str(k), shape_of(x)) for k, x in v.items()]))
    if isinstance(v, (list, tuple)):
        return ("array", frozenset([shape_of(x) for x in v]))
    return ("other", type(v).__name__)


def _schema_ok(value: Any, real: Any, schema: dict[str, Any] | None) -> bool:
    if schema is None:
        return shape_of(value) == shape_of(real)
    import jsonschema  # a dependency of mlflow / ray; only needed when result schemas exist

    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        return cls(schema).is_valid(value)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"result schema is not a valid JSON Schema: {exc.message}; fix the tool's "
                         f"result schema or pass schema=None to compare shapes") from None


def _same_json(a: Any, b: Any) -> bool:
    """Fast exact check (sorted-key JSON text); False may still be equal (1 vs 1.0): see leaves."""
    try:
        if orjson is None:
            return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
        return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS)
    except (TypeError, ValueError):
        return False


def score_parsed(valid: bool, value: Any, real_obj: Any, schema: dict[str, Any] | None = None) -> FidelityScores:
    """Scores of an already parsed rehearsed result (see `parse_rehearsed`)."""
    if not valid:
        return FidelityScores(json_valid=False, schema_ok=False, exact_match=False, field_f1=0.0)
    if _same_json(value, real_obj):  # the common case of a faithful rehearsal, without the leaf walk
        return FidelityScores(json_valid=True, schema_ok=_schema_ok(value, real_obj, schema) if schema else True,
                              exact_match=True, field_f1=1.0)
    p, g = leaves(value), leaves(real_obj)
    return FidelityScores(json_valid=True, schema_ok=_schema_ok(value, real_obj, schema), exact_match=p == g,
                          field_f1=_f1(p, g))


def turn_fidelity(turn: Turn, schema: dict[str, Any] | None = None) -> FidelityScores | None:
    """The fidelity verdict of a Rehearse turn that has a real observation (None otherwise): its stored
    observation (parsed once by the rollout; a hand-built turn without one is parsed here) against what
    the agent would have seen from the real environment."""
    if turn.real_observation is None:
        return None
    valid, value = parse_rehearsed(turn.text, turn.observation)
    return score_parsed(valid, value, turn.real_observation.agent_value(), schema)


def fidelity_metrics(rehearsed_text: Any, real_obj: Any, schema: dict[str, Any] | None = None,
                     observation: Observation | None = None) -> FidelityScores:
    """Scores of one rehearsed result text (or its already parsed `observation`) against the real result
    (a parsed JSON value)."""
    valid, value = parse_rehearsed(rehearsed_text, observation)
    return score_parsed(valid, value, real_obj, schema)


@dataclass
class ToolFidelity:
    """Mean scores over the pairs of one tool."""

    tool: str
    n: int
    json_valid: float
    schema_ok: float
    exact_match: float
    field_f1: float


def aggregate_by_tool(pairs: Iterable[tuple[str, FidelityScores]]) -> dict[str, ToolFidelity]:
    """Per-tool means of (tool name, scores) pairs, sorted by tool name."""
    sums: dict[str, list[float]] = {}
    for tool, s in pairs:
        acc = sums.setdefault(tool, [0, 0.0, 0.0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += float(s["json_valid"])
        acc[2] += float(s["schema_ok"])
        acc[3] += float(s["exact_match"])
        acc[4] += float(s["field_f1"])
    return {t: ToolFidelity(t, int(a[0]), a[1] / a[0], a[2] / a[0], a[3] / a[0], a[4] / a[0])
            for t, a in sorted(sums.items())}


_KEY_BAD = re.compile(r"[^A-Za-z0-9_\-./ ]")


def fidelity_metric_dict(per_tool: dict[str, ToolFidelity], prefix: str = "fidelity") -> dict[str, float]:
    """MLflow metrics `fidelity/<tool>/<score>`, plus `fidelity/all/<score>` weighted by pair count."""
    out: dict[str, float] = {}
    total = sum(f.n for f in per_tool.values())
    names = ("json_valid", "schema_ok", "exact_match", "field_f1")
    for f in per_tool.values():
        tool = _KEY_BAD.sub("_", f.tool)
        out[f"{prefix}/{tool}/n"] = float(f.n)
        for name in names:
            out[f"{prefix}/{tool}/{name}"] = getattr(f, name)
    if total:
        out[f"{prefix}/all/n"] = float(total)
        for name in names:
            out[f"{prefix}/all/{name}"] = sum(getattr(f, name) * f.n for f in per_tool.values()) / total
    return out


def turn_error_verdict(turn: Turn) -> tuple[bool, bool] | None:
    """(the rehearsal said the call failed, the real environment said so) of a Rehearse turn with a real
    observation; None without one."""
    if turn.real_observation is None:
        return None
    valid, value = parse_rehearsed(turn.text, turn.observation)
    return valid and is_error_value(value), is_error_value(turn.real_observation.agent_value())


@dataclass
class ToolErrorPrediction:
    """Counts of predicted vs real errors over the pairs of one tool; precision / recall None when undefined
    (no predicted, or no real, error)."""

    tool: str
    n: int
    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None


def aggregate_errors(verdicts: Iterable[tuple[str, bool, bool]]) -> dict[str, ToolErrorPrediction]:
    """Per tool (sorted by name) and over all tools ("all"), from (tool, predicted error, real error)."""
    acc: dict[str, list[int]] = {}
    for tool, pred, real in verdicts:
        for key in (tool, "all"):
            a = acc.setdefault(key, [0, 0, 0, 0])
            a[0] += 1
            a[1] += int(pred and real)
            a[2] += int(pred and not real)
            a[3] += int(real and not pred)
    return {t: ToolErrorPrediction(t, *a) for t, a in sorted(acc.items())}


def error_metric_dict(per_tool: dict[str, ToolErrorPrediction], prefix: str = "fidelity") -> dict[str, float]:
    """`<prefix>/<tool>/errors_real` and, where defined, `error_precision` / `error_recall`."""
    out: dict[str, float] = {}
    for f in per_tool.values():
        tool = _KEY_BAD.sub("_", f.tool)
        out[f"{prefix}/{tool}/errors_real"] = float(f.tp + f.fn)
        if f.precision is not None:
            out[f"{prefix}/{tool}/error_precision"] = f.precision
        if f.recall is not None:
            out[f"{prefix}/{tool}/error_recall"] = f.recall
    return out
