"""Model output is untrusted, on whole rollouts of the built-in world: a tool call or a Rehearse result holding a
lone surrogate used to parse as valid and then crash the tokenizer while the next prompt was built
(TypeError from the tokenizer), in rehearse and env modes alike. Now the escaped form is a classified
parse error and raw lone code points (a chat engine can return them) become U+FFFD before any prompt,
record or tokenizer sees them."""

from __future__ import annotations

import json

import pytest

from envace.config import RolloutConfig, SamplingConfig
from envace.rollout import run_rollout
from envace.store.models import TrajectoryMode
from envace.store.rows import to_bundle
from envace.types import ErrorCode, Mode, Observation, Role, TerminationReason
from envace.worlds import WorldEnvironment

CFG = RolloutConfig(act=SamplingConfig(max_new_tokens=64), rehearse=SamplingConfig(max_new_tokens=64),
                    max_assistant_turns=3, max_calls_per_turn=3, max_context_tokens=16_384)
LONE = "\ud83d"


def _call(name: str, args_json: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args_json}}}\n</tool_call>'


def _first_call(task) -> tuple[str, str]:
    """(name, string-typed property) of a task tool that takes one string argument."""
    for tool in task.tools:
        fn = tool["function"]
        props = fn["parameters"]["properties"]
        if len(props) == 1 and next(iter(props.values()))["type"] == "string":
            return fn["name"], next(iter(props))
    raise AssertionError("no one-string-argument tool in the task")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_clean(traj) -> None:
    assert isinstance(traj.termination, TerminationReason)
    for m in traj.messages:
        assert _utf8(m.content), m
    for t in traj.turns:
        assert _utf8(t.text)
    to_bundle(traj, run_id="r", step=0, mode=TrajectoryMode.TRAIN, split="train")  # storable as well


@pytest.mark.parametrize("mode", [Mode.REHEARSE, Mode.ENV])
def test_escaped_lone_surrogate_in_call_arguments_is_a_classified_error(fuzz_tokenizer, fuzz_kit, mode):
    task = fuzz_kit.world_tasks()[0]
    name, prop = _first_call(task)
    act = _call(name, f'{{"{prop}": "\\ud83d"}}')
    engine = fuzz_kit.HostileEngine(fuzz_tokenizer, act=lambda req: act,
                                    rehearse=lambda req: '<execution_result>\n{"ok": 1}\n</execution_result>')
    [traj] = run_rollout([task], k=1, policy=engine, cfg=CFG, mode=mode, env_factory=WorldEnvironment)
    acts = traj.turns_of(Role.ACT)
    assert acts and all(t.parse_error is ErrorCode.NON_SERIALIZABLE_ARGUMENTS for t in acts)
    # the default rule (invalid_call=observe) in every mode: Act sees the error and retries until the turn limit
    assert traj.termination is TerminationReason.MAX_TURNS
    assert len(acts) == CFG.max_assistant_turns
    assert traj.env_calls == 0  # the call never reached a tool
    _check_clean(traj)


def test_escaped_lone_surrogate_in_a_rehearsed_result_ends_the_episode(fuzz_tokenizer, fuzz_kit):
    task = fuzz_kit.world_tasks()[0]
    name, prop = _first_call(task)
    engine = fuzz_kit.HostileEngine(fuzz_tokenizer, act=lambda req: _call(name, json.dumps({prop: "x"})),
                                    rehearse=lambda req: '<execution_result>\n{"v": "\\ud83d"}\n</execution_result>')
    [traj] = run_rollout([task], k=1, policy=engine, cfg=CFG, mode=Mode.REHEARSE)
    [reh] = traj.turns_of(Role.REHEARSE)
    assert reh.parse_error is ErrorCode.RESULT_JSON_DECODE and reh.observation.content is None
    assert traj.termination is TerminationReason.REHEARSE_ERROR
    _check_clean(traj)


@pytest.mark.parametrize("mode", [Mode.REHEARSE, Mode.ENV])
def test_raw_lone_surrogates_from_an_engine_become_replacement_characters(fuzz_tokenizer, fuzz_kit, mode):
    task = fuzz_kit.world_tasks()[0]
    name, prop = _first_call(task)
    act = LONE + _call(name, json.dumps({prop: "a"}).replace("a", "a" + LONE)) + LONE
    rehearsed = f'<execution_result>\n{{"v": "b{LONE}"}}\n</execution_result>'
    engine = fuzz_kit.HostileEngine(fuzz_tokenizer, act=lambda req: act, rehearse=lambda req: rehearsed)
    [traj] = run_rollout([task], k=1, policy=engine, cfg=CFG, mode=mode, env_factory=WorldEnvironment,
                         rehearse_style="full")
    first = traj.turns_of(Role.ACT)[0]
    assert first.parse_error is None and first.tool_calls[0].arguments == {prop: "a\ufffd"}
    assert first.text == act.replace(LONE, "\ufffd")
    if mode is Mode.REHEARSE:
        assert traj.turns_of(Role.REHEARSE)[0].observation.content == {"v": "b\ufffd"}
    else:
        assert traj.env_calls >= 1
    assert traj.termination is TerminationReason.MAX_TURNS
    _check_clean(traj)


class _EchoEnv(WorldEnvironment):
    """The real world, plus a tool answer that echoes text with a lone surrogate (as a tool that
    decodes bytes with surrogateescape would)."""

    def execute(self, call):
        obs = super().execute(call)
        return Observation(content={"echo": f"{LONE}{obs.content}", f"k{LONE}": 1}, source=Role.ENV,
                           error=obs.error, detail=f"{obs.detail}{LONE}")


def test_environment_strings_with_lone_surrogates_are_cleaned(fuzz_tokenizer, fuzz_kit):
    task = fuzz_kit.world_tasks()[0]
    name, prop = _first_call(task)
    engine = fuzz_kit.HostileEngine(fuzz_tokenizer, act=lambda req: _call(name, json.dumps({prop: "x"})),
                                    rehearse=lambda req: "")
    [traj] = run_rollout([task], k=1, policy=engine, cfg=CFG, mode=Mode.ENV, env_factory=_EchoEnv)
    assert traj.env_calls == CFG.max_assistant_turns
    tool_msgs = [m for m in traj.messages if m.role == "tool"]
    assert tool_msgs and all("\\ufffd" in m.content or "\ufffd" in m.content for m in tool_msgs)
    _check_clean(traj)
