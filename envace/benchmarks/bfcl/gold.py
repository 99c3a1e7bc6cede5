"""A scripted `BenchPolicy` that answers BFCL entries with their ground truth, through the same OpenAI
message/tool interface a model uses. It checks our plumbing (data -> tools -> policy -> BFCL decoding and
checkers), not a model: gold answers must score 100 %, and `perturb=True` (one wrong argument value, or one
dropped ground-truth call in a multi-turn entry, or the opposite relevance decision) must score 0.

How the ground truth becomes tool calls:
- AST: each `{func: {param: [allowed...]}}` becomes a call to the OpenAI-renamed function ('.' -> '_')
  with the first allowed value per parameter; an optional parameter whose allowed list contains ""
  is left out (a required one gets its first non-"" value). Java / JavaScript arguments are written as the
  source-code strings BFCL's type converters parse back (`true`, `5L`, `new ArrayList<>(Arrays.asList(...))`,
  `[1, 2]`, `{a: 1}`...).
- Multi-turn: turn t's call strings (`cd(folder='x')`, positional arguments mapped by the tool's parameter
  order) are all emitted at step 0 of turn t; every later step, and every turn whose ground truth is
  empty (miss_param / miss_func turns), is a plain text reply.
- irrelevance / live_irrelevance: a text reply; live_relevance: a call to the first tool.
- memory (kv, rec_sum): a text reply stating the first ground-truth answer (perturbed: "Unclear."); the
  scenario's prerequisite conversations get a plain text reply (they are not scored).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from typing import Any

from envace.benchmarks.base import GoldOutcome
from envace.benchmarks.bfcl.compat import load_bfcl
from envace.benchmarks.bfcl.data import IRRELEVANCE, NOT_RUNNABLE, BFCLEntry, load_category
from envace.engines.reply import AssistantReply
from envace.types import ToolCall

WRONG = "envace_wrong_value"


def first_choice(allowed: list[Any], required: bool = False) -> tuple[bool, Any]:
    """(present, value): omit an optional parameter whose allowed list holds "", else the first non-""
    allowed value with nested dicts resolved the same way (dict params hold {key: [allowed...]}).
    A required parameter is always given (BFCL marks some required ones "" too)."""
    concrete = [v for v in allowed if v != ""]
    if not concrete or ("" in allowed and not required):
        return False, None
    value = concrete[0]
    if isinstance(value, dict):
        return True, _choose_dict(value)
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return True, [_choose_dict(v) for v in value]
    return True, value


def _choose_dict(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, allowed in d.items():
        present, v = first_choice(allowed if isinstance(allowed, list) else [allowed])
        if present:
            out[k] = v
    return out


# ----- Java / JavaScript source strings -------------------------------------------------------------

def _java_scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


def java_source(v: Any, typ: str, nested: str | None = None) -> str:
    if typ == "boolean" and isinstance(v, bool):
        return "true" if v else "false"
    if typ == "long" and isinstance(v, int):
        return f"{v}L"
    if typ == "float" and isinstance(v, (int, float)):
        return f"{v}f"
    if typ in ("ArrayList", "Array") and isinstance(v, list):
        if typ == "Array":  # parse_array converts each bare element with the nested type
            return f"new {nested or 'Object'}[]{{{', '.join(java_source(x, nested or 'String') for x in v)}}}"
        quote = "'" if nested == "char" else '"'
        items = [f"{quote}{x}{quote}" if nested in ("String", "char") else java_source(x, nested or "String")
                 for x in v]
        return f"new ArrayList<>(Arrays.asList({', '.join(items)}))"
    if typ == "HashMap" and isinstance(v, dict):
        puts = " ".join(f'put("{k}", {_java_scalar(x)});' for k, x in v.items())
        return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
    return str(v)


def _js_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_js_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_js_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def js_source(v: Any, typ: str) -> str:
    if typ == "Boolean" and isinstance(v, bool):
        return "true" if v else "false"
    if typ == "Bigint" and isinstance(v, int):
        return f"{v}n"
    if typ in ("array", "dict") and isinstance(v, (list, dict)):
        return _js_value(v)
    return str(v)


# ----- the policy -----------------------------------------------------------------------------------

def perturb_value(v: Any) -> Any:
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 7919
    if isinstance(v, float):
        return v + 7919.5
    if isinstance(v, list):
        return v[1:] if v else [WRONG]
    if isinstance(v, dict):
        return {**v, WRONG: WRONG}
    return f"{v}{WRONG}"


class BFCLGoldPolicy:
    name = "bfcl-gold"

    def __init__(self, entries: Iterable[BFCLEntry], perturb: bool = False) -> None:
        self.entries = {e.id: e for e in entries}
        self.perturb = perturb
        if perturb:
            self.name = "bfcl-gold-perturbed"

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, seed: int | None = None,
              context: Mapping[str, Any] | None = None) -> AssistantReply:
        entry_id = None if not context else context.get("entry_id")
        if entry_id not in self.entries and "_prereq_" in str(entry_id):  # memory prerequisite: not scored
            return AssistantReply(content="Noted.")
        if entry_id not in self.entries:
            raise KeyError(f"BFCLGoldPolicy has no entry {entry_id!r}")
        entry = self.entries[entry_id]
        if entry.kind == "memory":
            return AssistantReply(content="Unclear." if self.perturb else f"The answer is {entry.ground_truth[0]}.")
        calls = self._calls(entry, tools, int(context.get("turn", 0)), int(context.get("step", 0)))
        for i, c in enumerate(calls):
            c.id = f"call_{context.get('turn', 0)}_{context.get('step', 0)}_{i}"
        return AssistantReply(content="" if calls else "Done.", tool_calls=calls,
                              finish_reason="tool_calls" if calls else "stop")

    def _calls(self, entry: BFCLEntry, tools: list[dict[str, Any]], turn: int, step: int) -> list[ToolCall]:
        if entry.kind == "relevance":
            wants_call = entry.category not in IRRELEVANCE
            if wants_call != self.perturb and step == 0:
                return [ToolCall(tools[0]["function"]["name"], {})]
            return []
        if step > 0:
            return []
        if entry.kind == "ast":
            calls = self._ast_calls(entry)
            if self.perturb:
                calls[0] = self._perturbed(calls[0], entry)
            return calls
        if entry.kind == "multi_turn":
            gold = entry.ground_truth[turn] if turn < len(entry.ground_truth) else []
            if self.perturb and turn == next((t for t, g in enumerate(entry.ground_truth) if g), -1):
                gold = gold[:-1]
            return [parse_call(s, tools) for s in gold]
        raise ValueError(f"BFCLGoldPolicy cannot answer {entry.category!r}")

    def _ast_calls(self, entry: BFCLEntry, raw: bool = False) -> list[ToolCall]:
        docs = {f["name"]: f for f in entry.eval_prompt["function"]}
        calls = []
        for item in entry.ground_truth:
            (name, params), = item.items()
            props = docs[name]["parameters"]["properties"] if name in docs else {}
            required = set(docs[name]["parameters"].get("required", [])) if name in docs else set()
            args = {}
            for param, allowed in params.items():
                present, value = first_choice(allowed, param in required)
                if not present:
                    continue
                args[param] = value if raw else self._source(entry, props.get(param, {}), value)
            calls.append(ToolCall(name.replace(".", "_"), args))
        return calls

    @staticmethod
    def _source(entry: BFCLEntry, spec: dict[str, Any], value: Any) -> Any:
        typ = spec.get("type", "")
        nested = (spec.get("items") or {}).get("type")
        if entry.category == "simple_java":
            return java_source(value, typ, nested)
        if entry.category == "simple_javascript":
            return js_source(value, typ)
        return value

    def _perturbed(self, call: ToolCall, entry: BFCLEntry) -> ToolCall:
        if not call.arguments:
            return ToolCall(call.name + "_" + WRONG, {})
        raw = self._ast_calls(entry, raw=True)[0].arguments
        key = next(iter(call.arguments))
        docs = {f["name"].replace(".", "_"): f for f in entry.eval_prompt["function"]}
        spec = docs.get(call.name, {}).get("parameters", {}).get("properties", {}).get(key, {})
        return ToolCall(call.name, {**call.arguments, key: self._source(entry, spec, perturb_value(raw[key]))})


def parse_call(text: str, tools: list[dict[str, Any]]) -> ToolCall:
    """`name(a=1, 'x')` -> ToolCall; positional arguments take the tool's parameter names in order."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"ground-truth call {text!r} is not a plain function call")
    name = node.func.id
    schema = next((t["function"] for t in tools if t["function"]["name"] == name), None)
    order = list((schema or {}).get("parameters", {}).get("properties", {}))
    if len(node.args) > len(order):
        raise ValueError(f"ground-truth call {text!r} has {len(node.args)} positional arguments but the tool "
                         f"{name!r} declares {order}")
    args = {order[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({kw.arg: ast.literal_eval(kw.value) for kw in node.keywords})
    return ToolCall(name, args)


def gold_replay(options: Mapping[str, Any], paths: Mapping[str, str | None], limit: int | None,
                seed: int) -> GoldOutcome:
    """`BFCLGoldPolicy` over the selected runnable categories, scored by BFCL's own checkers."""
    from envace.benchmarks.bfcl.benchmark import BFCLBenchmark

    bench = BFCLBenchmark(**dict(options))
    entries = [e for c in bench.categories if c not in NOT_RUNNABLE for e in load_category(c, limit)]
    result = bench.run(BFCLGoldPolicy(entries), limit=limit, k=1, seed=seed)
    return GoldOutcome.of(result, source=f"bfcl-eval {load_bfcl().version}")
