"""Whole rollouts of the built-in world driven by hostile model output (model output is untrusted
everywhere): every Act and Rehearse generation is a fresh hypothesis draw mixing lone
surrogates (raw and escaped), repeated openers, giant and non-finite numbers, deep nesting, huge
strings and end markers with near-valid tool calls and results (so the episodes get past the first
parse and reach Rehearse, the environment, the next prompt and the store rows).

Each test drives several hundred rollouts (3 tasks x 2 episodes each) and asserts, for every
trajectory: no exception, a TerminationReason, one turn per generation, only UTF-8-encodable text in
the history and the turns, a rehearsed observation that matches its parse error, and rows the store
can write (with fidelity pairs against a shadow environment). At the end it checks that at least
2,000 hostile outputs per role were actually fed to the rollout. Derandomised, so the counts and the
examples are the same on every run.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envace.config import RolloutConfig, SamplingConfig
from envace.roles.prompts import STYLES
from envace.rollout import run_rollout
from envace.store.models import TrajectoryMode
from envace.store.rows import PAIR_COLUMNS, to_bundle
from envace.types import ErrorCode, Mode, Role, TerminationReason
from envace.worlds import WorldEnvironment, domain_names, generate_tasks

DOMAINS = domain_names()
TASKS = {d: generate_tasks(3, "train", 0, domains=[d]) for d in DOMAINS}  # 3 tasks per built-in domain
SIGNATURES = {d: sorted({(t["function"]["name"], tuple((k, v["type"]) for k, v in
                                                      t["function"]["parameters"]["properties"].items()))
                         for task in tasks for t in task.tools})
              for d, tasks in TASKS.items()}
ALL_SIGNATURES = sorted({sig for sigs in SIGNATURES.values() for sig in sigs})
CFG = RolloutConfig(act=SamplingConfig(max_new_tokens=256), rehearse=SamplingConfig(max_new_tokens=256),
                    max_assistant_turns=3, max_calls_per_turn=3, max_context_tokens=12_000)
MIN_FED = 2_000  # hostile outputs per role
REHEARSE_EXAMPLES, ENV_EXAMPLES = 300, 220  # rollouts per test, each 3 tasks of one domain x 2 episodes

# ----- strategies ------------------------------------------------------------------------------------

SURROGATE = st.integers(0xD800, 0xDFFF).map(chr)  # a lone code point, as a chat engine may return
ESCAPED_SURROGATE = st.sampled_from(["\\ud83d", "\\udc00", "\\udfff\\ud800", "\\ud83d\\ude00"])
OPENERS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<execution_result>", "</execution_result>",
           "<|im_end|>", "<|endoftext|>", "{", "[", '"', "\\"]
REPEATED = st.tuples(st.sampled_from(OPENERS), st.integers(1, 800)).map(lambda t: t[0] * t[1])
GIANT_NUMBER = st.one_of(
    st.sampled_from(["1e400", "-1e400", "1E999", "NaN", "Infinity", "-Infinity", "1e-400", "-0", "0.0e0"]),
    st.integers(290, 5000).map(lambda n: "9" * n),
    st.integers(-(2**200), 2**200).map(str),
)
DEEP = st.one_of(  # around MAX_JSON_DEPTH (100) and past the json module's recursion limit (~1000)
    st.sampled_from([99, 100, 101, 1200]).map(lambda d: "[" * d + "]" * d),
    st.integers(20, 400).map(lambda d: '{"a": ' * d + "1" + "}" * d),
    st.integers(20, 400).map(lambda d: "[" * d),  # unclosed
)
HUGE_STRING = st.integers(500, 6_000).map(lambda n: json.dumps("x" * n))  # 1 MB inputs: tests/roles, bench/
HOSTILE_STRING = st.one_of(
    st.text(max_size=12).map(json.dumps),
    st.tuples(st.text(max_size=4), SURROGATE).map(lambda t: '"' + t[0].replace('"', "") + t[1] + '"'),
    ESCAPED_SURROGATE.map(lambda s: f'"a{s}"'),
    st.sampled_from(OPENERS).map(json.dumps),
    HUGE_STRING,
)
HOSTILE_VALUE = st.one_of(HOSTILE_STRING, GIANT_NUMBER, DEEP, st.sampled_from(["null", "true", "{}", "[]", "1"]))
NOISE = st.one_of(st.text(max_size=20), REPEATED, SURROGATE, ESCAPED_SURROGATE, GIANT_NUMBER, DEEP)


@st.composite
def tool_call(draw) -> str:
    """A `<tool_call>` block: a real tool of the world with typed or hostile argument values, or noise."""
    name, props = draw(st.sampled_from(ALL_SIGNATURES))
    if draw(st.integers(0, 9)) == 0:
        name = draw(st.sampled_from(["", "nope", "get\\ud83d", "x" * 500]))
    parts = []
    for key, typ in props:
        if draw(st.booleans()):  # a well-typed value (maybe with hostile text inside a string)
            value = draw(st.integers(-5, 50).map(str) if typ == "integer" else HOSTILE_STRING)
        else:
            value = draw(HOSTILE_VALUE)
        parts.append(f"{json.dumps(key)}: {value}")
    args = "{" + ", ".join(parts) + "}"
    if draw(st.integers(0, 9)) == 0:
        args = json.dumps(args)  # OpenAI style: arguments as a JSON string
    return f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {args}}}\n</tool_call>'


SAFE_STRING = st.one_of(  # valid JSON strings that still carry hostile text (a raw surrogate becomes U+FFFD)
    st.sampled_from(["a5", "tape", "eve", "mon", "<tool_call>", "</execution_result>", "<think>", "\ufffd", "😀"])
    .map(json.dumps),
    SURROGATE.map(lambda c: f'"x{c}"'),
)


@st.composite
def valid_call(draw, domain: str) -> str:
    """A well-formed call of a tool of `domain`, well-typed arguments (strings may hold hostile text)."""
    name, props = draw(st.sampled_from(SIGNATURES[domain]))
    args = ", ".join(f"{json.dumps(k)}: {draw(st.integers(0, 30).map(str) if t == 'integer' else SAFE_STRING)}"
                     for k, t in props)
    return f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {{{args}}}}}\n</tool_call>'


@st.composite
def mostly_valid_act_output(draw, domain: str) -> str:
    """Rehearse-mode Act output: 4 in 5 are 2-3 valid calls (so Rehearse is reached), else hostile."""
    if draw(st.integers(0, 4)) == 0:
        return draw(act_output())
    calls = "".join(draw(valid_call(domain)) for _ in range(draw(st.integers(2, 3))))
    return draw(st.sampled_from(["", "<think>plan</think>", "\ud83d"])) + calls + "<|im_end|>"


@st.composite
def act_output(draw) -> str:
    pieces = [draw(NOISE) for _ in range(draw(st.integers(0, 2)))]
    pieces += [draw(tool_call()) for _ in range(draw(st.integers(0, 3)))]
    if draw(st.booleans()):
        pieces.insert(0, "<think>" + draw(NOISE) + draw(st.sampled_from(["</think>", ""])))
    if draw(st.integers(0, 3)) == 0:
        pieces.append(draw(NOISE))
    return "".join(pieces) + "<|im_end|>" * draw(st.integers(0, 3))


@st.composite
def rehearse_output(draw) -> str:
    kind = draw(st.integers(0, 3))
    if kind == 0:  # pure noise
        return draw(NOISE)
    if kind == 1:  # a result block with hostile JSON inside
        body = draw(HOSTILE_VALUE)
    else:  # an object whose values are hostile or fine
        body = "{" + ", ".join(f'"k{i}": {draw(st.one_of(HOSTILE_VALUE, st.integers(0, 9).map(str)))}'
                               for i in range(draw(st.integers(1, 3)))) + "}"
    text = f"<execution_result>\n{body}\n</execution_result>"
    if draw(st.integers(0, 4)) == 0:
        text = draw(NOISE) + text
    if draw(st.integers(0, 4)) == 0:
        text = "<think>" + draw(NOISE) + "</think>" + text
    return text + "<|im_end|>" * draw(st.integers(0, 2))


FUZZ = settings(deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck))

# ----- checks ------------------------------------------------------------------------------------


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check(trajs, engine, mode: Mode) -> None:
    assert sum(len(t.turns) for t in trajs) == sum(engine.fed.values())  # one turn per generation
    for traj in trajs:
        assert isinstance(traj.termination, TerminationReason)
        assert 1 <= len(traj.turns_of(Role.ACT)) <= CFG.max_assistant_turns
        assert all(_utf8(m.content) and _utf8(m.name or "") for m in traj.messages)
        for turn in traj.turns:
            assert _utf8(turn.text)
            assert turn.parse_error is None or isinstance(turn.parse_error, ErrorCode)
            if turn.role is Role.REHEARSE:
                obs = turn.observation
                assert obs.source is Role.REHEARSE and (obs.content is None) is (turn.parse_error is not None)
                assert _utf8(obs.to_text())
        n_rehearse = len(traj.turns_of(Role.REHEARSE))
        if mode is Mode.REHEARSE:  # the shadow environment answers every rehearsed call, and only those
            assert traj.env_calls == n_rehearse
        else:
            assert n_rehearse == 0
        bundle = to_bundle(traj, run_id="fuzz", step=0, mode=TrajectoryMode.TRAIN, split="train")
        valid = PAIR_COLUMNS.index("json_valid")
        assert [p[valid] for p in bundle.pairs] == [t.observation.content is not None
                                                    for t in traj.turns_of(Role.REHEARSE)]


def _fuzz(tokenizer, kit, mode: Mode, examples: int) -> Counter:
    fed: Counter = Counter()

    @settings(FUZZ, max_examples=examples)
    @given(domain=st.sampled_from(DOMAINS), style=st.sampled_from(STYLES), data=st.data())
    def run(domain, style, data):
        acts = mostly_valid_act_output(domain) if mode is Mode.REHEARSE else act_output()
        engine = kit.HostileEngine(tokenizer, act=lambda req: data.draw(acts),
                                   rehearse=lambda req: data.draw(rehearse_output()))
        trajs = run_rollout(TASKS[domain], k=2, policy=engine, cfg=CFG, mode=mode, env_factory=WorldEnvironment,
                            shadow_env_factory=WorldEnvironment if mode is Mode.REHEARSE else None,
                            rehearse_style=style)
        _check(trajs, engine, mode)
        fed.update(engine.fed)

    run()
    return fed


@pytest.mark.slow
def test_rehearse_mode_rollouts_survive_hostile_act_and_rehearse_output(fuzz_tokenizer, fuzz_kit):
    fed = _fuzz(fuzz_tokenizer, fuzz_kit, Mode.REHEARSE, REHEARSE_EXAMPLES)
    print(f"rehearse mode: hostile outputs fed {dict(fed)}")
    assert fed[Role.REHEARSE] >= MIN_FED, fed  # (Act outputs: >= MIN_FED in the env-mode test)


@pytest.mark.slow
def test_env_mode_rollouts_survive_hostile_act_output(fuzz_tokenizer, fuzz_kit):
    fed = _fuzz(fuzz_tokenizer, fuzz_kit, Mode.ENV, ENV_EXAMPLES)
    print(f"env mode: hostile outputs fed {dict(fed)}")
    assert fed[Role.ACT] >= MIN_FED, fed
