"""Bounded YAML for configs: one loader for config files and `key=value` overrides, decided on the node
graph before anything is expanded.

- `compose_bounded` parses a text to PyYAML's node graph (aliases are shared nodes there, so the graph is
  as small as the text) and refuses, before any value is constructed, more values than YAML_VALUES or
  more string characters than YAML_CHARS once every alias is expanded (a "billion laughs" list, or one
  long string reached through many aliases).
- `StrictLoader` constructs the checked graph and refuses a key repeated in one mapping, block or flow
  style, compared as constructed (`1` and `0x1` too): YAML says duplicate keys are an error; PyYAML keeps
  the last silently. `<<` merge keys are exempt: an explicit key overriding a merged one is the point.
- `interpolated_size` counts the same two quantities for an OmegaConf tree whose `${a.b}` references
  are not yet resolved (they copy the node they name, so they expand like aliases), to bound what
  resolving will build.

Errors are `YamlLimitError` (a ValueError with `where`, `what`, `fix`); envace.config turns them into
ConfigErrors. The limits are envace.input_budget's.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from envace.input_budget import YAML_CHARS, YAML_VALUES, BudgetError

MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlLimitError(ValueError):
    def __init__(self, where: str, what: str, fix: str) -> None:
        super().__init__(f"{where}: {what}; {fix}")
        self.where, self.what, self.fix = where, what, fix

    @classmethod
    def of(cls, exc: BudgetError) -> YamlLimitError:
        return cls(exc.where, exc.what, exc.fix)


def _duplicate(source: str, first: yaml.Node, again: yaml.Node, key: Any) -> YamlLimitError:
    a, b = first.start_mark, again.start_mark
    if a.line != b.line:
        where, was = f"line {b.line + 1}", f"first on line {a.line + 1}"
    else:
        where, was = f"line {b.line + 1}, column {b.column + 1}", f"first at column {a.column + 1}"
    return YamlLimitError(f"{source}: {where}", f"duplicate key {key!r} ({was})", "keep one of them")


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys in one mapping (block or flow), compared as constructed."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: SafeConstructor reports it
                continue
            if first is not key_node:
                raise _duplicate(self.name, first, key_node, key)
        return super().construct_mapping(node, deep=deep)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def expanded_size(root: yaml.Node) -> tuple[int, int]:
    """(values, string characters) the node graph holds once every alias is expanded, each capped just past
    its limit. Aliases share nodes, so this is memoised and linear in the text; iterative, so a deep file
    cannot crash it."""
    cap_v, cap_c = YAML_VALUES.value() + 1, YAML_CHARS.value() + 1
    order: list[yaml.Node] = []
    stack, seen = [root], set()
    while stack:  # post-order without recursion
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        order.append(node)
        stack.extend(_children(node))
    memo: dict[int, tuple[int, int]] = {}
    for node in reversed(order):
        if isinstance(node, yaml.ScalarNode):
            memo[id(node)] = (1, min(len(node.value), cap_c))
            continue
        v = c = 0
        for child in _children(node):
            cv, cc = memo.get(id(child), (1, 0))
            v, c = v + cv, c + cc
        memo[id(node)] = (min(1 + v, cap_v), min(c, cap_c))
    return memo[id(root)]


def _check(values: int, chars: int, where: str, how: str) -> None:
    for budget, size in ((YAML_VALUES, values), (YAML_CHARS, chars)):
        if size > budget.value():
            raise YamlLimitError.of(budget.error(where, f"expands through {how} to", None,
                                                 "write the values out or use fewer nested references"))


def compose_bounded(text: str, source: str) -> tuple[StrictLoader, yaml.Node | None]:
    """The loader and node graph of `text` (one YAML document), checked as the module docstring says.
    The caller constructs (`loader.construct_document(node)`) and disposes of the loader."""
    loader = StrictLoader(text)
    loader.name = source
    try:
        node = loader.get_single_node()
        if node is not None:
            _check(*expanded_size(node), source, "YAML aliases")
    except BaseException:
        loader.dispose()
        raise
    return loader, node


# ----- OmegaConf `${...}` references ----------------------------------------------------------------

_REF = re.compile(r"\$\{([A-Za-z0-9_.\[\]-]*)\}")  # a plain node reference (resolvers `${x:...}` are left out)


def _lookup(root: Any, here: tuple[Any, ...], ref: str) -> tuple[tuple[Any, ...], Any] | None:
    """(path, value) of the node `ref` names from the string at path `here`, or None when there is none."""
    dots = len(ref) - len(ref.lstrip("."))
    base = list(here[:-1]) if dots else []  # relative: from the container holding the string
    for _ in range(max(0, dots - 1)):
        if not base:
            return None
        base.pop()
    parts = [p for p in re.split(r"[.\[\]]", ref[dots:]) if p]
    node = root
    for key in base:
        node = node[key]
    path = list(base)
    for p in parts:
        if isinstance(node, dict) and p in node:
            node, key = node[p], p
        elif isinstance(node, list) and p.isdigit() and int(p) < len(node):
            node, key = node[int(p)], int(p)
        else:
            return None
        path.append(key)
    return tuple(path), node


def interpolated_size(root: Any, where: str) -> tuple[int, int]:
    """(values, string characters) of a plain container (OmegaConf's unresolved `to_container`) once its
    `${a.b}` node references are resolved; raises YamlLimitError over YAML_VALUES / YAML_CHARS. A
    reference to a missing node, or a cycle, counts as its text (OmegaConf reports those itself)."""
    cap_v, cap_c = YAML_VALUES.value() + 1, YAML_CHARS.value() + 1
    memo: dict[tuple[Any, ...], tuple[int, int]] = {}
    busy: set[tuple[Any, ...]] = set()

    def size(path: tuple[Any, ...], value: Any) -> tuple[int, int]:
        if path in memo:
            return memo[path]
        if path in busy:
            return 1, 0
        busy.add(path)
        if isinstance(value, dict):
            v, c = 1, 0
            items = list(value.items())
        elif isinstance(value, list):
            v, c = 1, 0
            items = list(enumerate(value))
        elif isinstance(value, str):
            refs = _REF.findall(value)
            v, c, items = 1, len(value), []
            for ref in refs:
                found = _lookup(root, path, ref)
                if found is not None:
                    rv, rc = size(*found)
                    if value.strip() == f"${{{ref}}}":  # the whole value is the node named
                        v, c = rv, rc
                    else:  # a string with the node's text inside
                        c += rc
        else:
            v, c, items = 1, 0, []
        for key, child in items:
            cv, cc = size((*path, key), child)
            v, c = min(v + cv, cap_v), min(c + cc, cap_c)
        busy.discard(path)
        memo[path] = (min(v, cap_v), min(c, cap_c))
        return memo[path]

    try:
        values, chars = size((), root)
    except RecursionError:
        raise YamlLimitError(where, "references nest too deeply to resolve", "use fewer chained ${...} "
                             "references") from None
    _check(values, chars, where, "${...} references")
    return values, chars


__all__ = ["StrictLoader", "YamlLimitError", "compose_bounded", "expanded_size", "interpolated_size"]
