"""Parse times on adversarial model output.

Two tables:
1. Every parser on ~1 MB adversarial inputs (repeated openers, 100k trailing end markers, deep nesting,
   escaped lone surrogates, overflowing numbers, many valid calls): best of 3 runs; the target is
   < 0.2 s each.
2. Ratio against the named baseline, the pre-fix scanning code (lazy `<tag>(.*?)</tag>` regular
   expressions and copy-per-marker stripping, reproduced below), measured in the same run on the sizes
   of the inputs that were slow (44 KB of `<tool_call>`, 56 KB of `<think>`, 50,000 trailing `<|im_end|>`, 44 KB of
   `<execution_result>` for the lenient fidelity regex); the baseline is quadratic, so it is not run
   at 1 MB (minutes).

    .venv/bin/python bench/parse_bench.py            # add --quick to skip the baseline table
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections.abc import Callable

from envace.execution_result import parse_execution_result
from envace.fidelity import parse_rehearsed
from envace.roles.act import parse_act
from envace.toolcall import parse_tool_calls, tool_schema

MB = 1_000_000
TOOLS = [tool_schema("get_stock", {"item": {"type": "string"}})]
CALL = '<tool_call>{"name": "get_stock", "arguments": {"item": "apple"}}</tool_call>'
RESULT = '<execution_result>{"stock": 5}</execution_result>'


def fill(piece: str, size: int = MB) -> str:
    return piece * max(1, size // len(piece))


def act_inputs() -> dict[str, str]:
    return {
        '"<tool_call>" * n': fill("<tool_call>"),
        '"<think>" * n': fill("<think>"),
        '"<tool_call>{" * n': fill("<tool_call>{"),
        '"</tool_call>" * n': fill("</tool_call>"),
        "valid call * n": fill(CALL + "\n"),
        "call + <|im_end|> * n": CALL + fill("<|im_end|>"),
        "deep nesting": "<tool_call>" + "[" * (MB // 2) + "]" * (MB // 2) + "</tool_call>",
        "escaped surrogates": '<tool_call>{"name": "get_stock", "arguments": {"item": "'
                              + fill("\\ud83d") + '"}}</tool_call>',
        "1e400 * n": '<tool_call>{"name": "get_stock", "arguments": {"item": [' + fill("1e400,") + "1]}}</tool_call>",
        "raw lone surrogates": fill("\ud83d<tool_call>"),
    }


def rehearse_inputs() -> dict[str, str]:
    return {
        "result + <|im_end|> * n": RESULT + fill("<|im_end|>"),
        '"<execution_result>" * n': fill("<execution_result>"),
        '"<think>" * n': fill("<think>"),
        "deep nesting": "<execution_result>" + "[" * (MB // 2) + "]" * (MB // 2) + "</execution_result>",
        "ints * n": "<execution_result>[" + fill("1,") + "1]</execution_result>",
        "1e400 * n": "<execution_result>[" + fill("1e400,") + "1]</execution_result>",
        "escaped surrogates": '<execution_result>{"a": "' + fill("\\ud83d") + '"}</execution_result>',
        "one huge string": '<execution_result>{"a": "' + fill("x") + '"}</execution_result>',
    }


def best(fn: Callable[[str], object], text: str, runs: int = 3) -> float:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(text)
        out.append(time.perf_counter() - t0)
    return min(out)


# ----- the named baseline: the pre-fix scanning code ------------------------------------------------

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL)
_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_RESULT_RE = re.compile(r"<execution_result>(.*?)</execution_result>", re.DOTALL)


def baseline_act_scan(text: str) -> object:
    text = _THINK_RE.sub("", text)
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    text = text.replace("</think>", "")
    return _CALL_RE.findall(text), _CALL_RE.sub("", text).strip(), _CALL_RE.sub("", text)


def baseline_strip_end_markers(text: str) -> str:
    out = text.rstrip()
    changed = True
    while changed:
        changed = False
        for marker in ("<|im_end|>", "<|endoftext|>"):
            if out.endswith(marker):
                out = out[: -len(marker)].rstrip()
                changed = True
    return out


def baseline_fidelity_scan(text: str) -> object:
    return _RESULT_RE.search(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip the (slow, quadratic) baseline table")
    args = ap.parse_args()

    rows: list[tuple[str, str, int, float]] = []
    for name, text in act_inputs().items():
        rows.append(("parse_tool_calls", name, len(text), best(parse_tool_calls, text)))
        rows.append(("parse_act", name, len(text), best(lambda t: parse_act(t, TOOLS), text)))
    for name, text in rehearse_inputs().items():
        rows.append(("parse_execution_result", name, len(text), best(parse_execution_result, text)))
        rows.append(("fidelity.parse_rehearsed", name, len(text), best(parse_rehearsed, text)))
    print(f"machine load average (1 min): {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("1. ~1 MB adversarial inputs (best of 3); target < 0.2 s each")
    print(f"{'parser':26s} {'input':28s} {'chars':>9s} {'seconds':>8s}")
    for parser, name, n, sec in rows:
        print(f"{parser:26s} {name:28s} {n:9,d} {sec:8.4f}{'' if sec < 0.2 else '  OVER 0.2 s'}")
    ints = rehearse_inputs()["ints * n"]
    body = ints[len("<execution_result>"): -len("</execution_result>")]
    print(f"reference: stdlib json.loads (no checks) of the 'ints * n' body: {best(json.loads, body):.4f} s "
          f"(that row is JSON decoding of 500,000 numbers, not tag scanning)")
    worst = max(rows, key=lambda r: r[3])
    print(f"worst: {worst[0]} on {worst[1]}: {worst[3]:.4f} s -> {'PASS' if worst[3] < 0.2 else 'FAIL'}")
    if args.quick:
        return

    print("\n2. against the baseline (pre-fix scanning code), same inputs, same run")
    print(f"{'input':40s} {'chars':>8s} {'baseline s':>11s} {'now s':>8s} {'speed-up':>9s}")
    cases = [
        ('parse_tool_calls("<tool_call>" * 4000)', "<tool_call>" * 4000, baseline_act_scan, parse_tool_calls),
        ('parse_tool_calls("<think>" * 8000)', "<think>" * 8000, baseline_act_scan, parse_tool_calls),
        ("parse_execution_result(50,000 <|im_end|>)", RESULT + "<|im_end|>" * 50_000, baseline_strip_end_markers,
         parse_execution_result),
        ('parse_rehearsed("<execution_result>" * 2400)', "<execution_result>" * 2400, baseline_fidelity_scan,
         parse_rehearsed),
    ]
    for label, text, old, new in cases:
        t_old, t_new = best(old, text, runs=1), best(new, text)
        print(f"{label:40s} {len(text):8,d} {t_old:11.3f} {t_new:8.4f} {t_old / t_new:8.0f}x")


if __name__ == "__main__":
    main()
