"""`envace serve` (FastAPI + uvicorn on 127.0.0.1, a free port) serving a real tiny Qwen3 model dir, talked to
over real HTTP by OpenAIChatClient. Expected values are computed independently with the tokenizer (prompt
token counts) or by an earlier greedy run (stop strings). One model is first trained for a few seconds to
memorise a tool call for one prompt, so the Hermes -> OpenAI `tool_calls` path runs on real model output."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest
import torch

from envace.engines.chat_model import HFChatPolicy, LocalChatModel, extract_json, normalize_messages, split_reasoning
from envace.engines.openai_client import ChatClientError, OpenAIChatClient, OpenAIPolicy
from envace.engines.server import background_server, create_app

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def prompt_len(tokenizer, messages, tools=None) -> int:
    text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    return len(tokenizer.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def chat(tiny_dir):
    return LocalChatModel.from_dir(tiny_dir, name="tiny", device="cpu")


@pytest.fixture(scope="module")
def url(chat):
    with background_server(create_app(chat=chat)) as base:
        yield base


@pytest.fixture(scope="module")
def caller_dir(tiny_dir, tmp_path_factory):
    """The tiny model trained (a few seconds) until greedy decoding of ASK+WEATHER gives CALL_TEXT."""
    from envace.models.loading import load_policy

    torch.manual_seed(0)
    model, tok = load_policy(tiny_dir, device="cpu")
    prompt = tok.encode(tok.apply_chat_template(ASK, tools=[WEATHER], add_generation_prompt=True, tokenize=False),
                        add_special_tokens=False)
    target = tok.encode(CALL_TEXT + "<|im_end|>", add_special_tokens=False)
    ids = torch.tensor([prompt + target])
    labels = ids.clone()
    labels[0, :len(prompt)] = -100
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(400):
        out = model(input_ids=ids, labels=labels)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        pred = out.logits[0, len(prompt) - 1:-1].argmax(-1)
        if torch.equal(pred, ids[0, len(prompt):]):
            break
    else:
        pytest.fail("the tiny model did not memorise the tool call in 400 steps")
    out_dir = tmp_path_factory.mktemp("caller") / "model"
    shutil.copytree(tiny_dir, out_dir)
    model.eval().save_pretrained(out_dir)
    return out_dir


def test_models_endpoint(url):
    assert OpenAIChatClient(url, "tiny").models() == ["tiny"]


def test_chat_completion_over_http(url, chat):
    client = OpenAIChatClient(url, "tiny")
    r = client.chat(ASK, temperature=0.0, max_tokens=12)
    assert r.raw["object"] == "chat.completion" and r.raw["model"] == "tiny"
    assert r.usage["prompt_tokens"] == prompt_len(chat.tokenizer, ASK)
    assert 1 <= r.usage["completion_tokens"] <= 12
    assert r.usage["total_tokens"] == r.usage["prompt_tokens"] + r.usage["completion_tokens"]
    assert r.finish_reason in ("stop", "length") and isinstance(r.text, str)
    assert client.chat(ASK, temperature=0.0, max_tokens=12).text == r.text  # greedy is deterministic


def test_seeded_sampling_is_reproducible_and_n_choices(url):
    client = OpenAIChatClient(url, "tiny")
    a = client.chat(ASK, temperature=1.0, max_tokens=10, seed=5, n=2)
    b = client.chat(ASK, temperature=1.0, max_tokens=10, seed=5, n=2)
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert len(a.choices) == 2
    # choice i is sampled with seed + i, so choice 1 of seed 5 is choice 0 of seed 6
    assert client.chat(ASK, temperature=1.0, max_tokens=10, seed=6).text == a.choices[1].text


def test_tools_go_into_the_prompt(url, chat):
    r = OpenAIChatClient(url, "tiny").chat(ASK, tools=[WEATHER], temperature=0.0, max_tokens=4)
    assert r.usage["prompt_tokens"] == prompt_len(chat.tokenizer, ASK, [WEATHER])
    assert r.usage["prompt_tokens"] > prompt_len(chat.tokenizer, ASK)


def test_stop_string_is_cut_like_openai(url):
    client = OpenAIChatClient(url, "tiny")
    full = client.chat(ASK, temperature=1.0, seed=1, max_tokens=24).text  # the random model's greedy text is blank
    stop = next(full[i:i + 2] for i in range(1, len(full) - 1) if full[i:i + 2].isascii() and full[i:i + 2].isalpha())
    cut = client.chat(ASK, temperature=1.0, seed=1, max_tokens=24, stop=[stop])
    assert cut.text == full[:full.index(stop)] and cut.finish_reason == "stop"


def test_http_errors(url):
    client = OpenAIChatClient(url, "not-served", max_retries=3, backoff=0.01)
    with pytest.raises(ChatClientError) as info:
        client.chat(ASK)
    assert info.value.status == 404 and "tiny" in str(info.value)
    for body, fragment in [({"model": "tiny", "messages": []}, "non-empty"),
                           ({"model": "tiny", "messages": ASK, "stream": True}, "stream"),
                           ({"model": "tiny", "messages": ASK, "tool_choice": "required"}, "tool_choice"),
                           ({"model": "tiny", "messages": ASK, "temperature": -1}, "temperature"),
                           ({"model": "tiny", "messages": [{"content": "no role"}]}, "role")]:
        resp = httpx.post(url + "/v1/chat/completions", json=body)
        assert resp.status_code == 400, body
        assert fragment in resp.json()["error"]["message"]


def test_tool_call_from_real_model_output(caller_dir):
    served = LocalChatModel.from_dir(caller_dir, name="caller", device="cpu")
    with background_server(create_app(chat=served)) as base:
        raw = httpx.post(base + "/v1/chat/completions",
                         json={"model": "caller", "messages": ASK, "tools": [WEATHER], "temperature": 0}).json()
        policy = OpenAIPolicy(OpenAIChatClient(base, "caller"))
        reply = policy.reply(ASK, [WEATHER])
        no_parse = httpx.post(base + "/v1/chat/completions", json={
            "model": "caller", "messages": ASK, "tools": [WEATHER], "temperature": 0, "tool_choice": "none"}).json()
    choice = raw["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert reply.tool_calls[0].name == "get_weather" and reply.tool_calls[0].arguments == {"city": "Paris"}
    # tool_choice=none: the text comes back unparsed
    assert no_parse["choices"][0]["message"]["content"] == CALL_TEXT
    assert "tool_calls" not in no_parse["choices"][0]["message"]
    # the in-process policy gives the same reply as the HTTP path
    local = HFChatPolicy(served).reply(ASK, [WEATHER])
    assert [(c.name, c.arguments) for c in local.tool_calls] == [("get_weather", {"city": "Paris"})]


def test_history_with_string_arguments_renders_like_dict_arguments(chat):
    as_str = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"}]
    as_dict = json.loads(json.dumps(as_str))
    as_dict[1]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
    assert chat.render(as_str, [WEATHER])[0] == chat.render(as_dict, [WEATHER])[0]
    assert normalize_messages(as_str)[1]["content"] == ""


def test_json_schema_is_best_effort(url, chat):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    with_schema = OpenAIChatClient(url, "tiny").chat(ASK, json_schema=schema, max_tokens=4)
    assert with_schema.usage["prompt_tokens"] > prompt_len(chat.tokenizer, ASK)  # the instruction went in
    assert extract_json('Sure: {"ok": true} done') == '{"ok": true}'
    assert extract_json("[1, 2]") == "[1, 2]" and extract_json("no json {here") is None


def test_split_reasoning():
    assert split_reasoning("<think>\nplan\n</think>\n\nanswer") == ("plan", "answer")
    assert split_reasoning("plain") == ("", "plain")


def test_context_limit_is_a_400(tiny_dir):
    small = LocalChatModel.from_dir(tiny_dir, name="small", device="cpu", max_model_len=20)
    with background_server(create_app(chat=small)) as base:
        with pytest.raises(ChatClientError) as info:
            OpenAIChatClient(base, "small", max_retries=0).chat(ASK, max_tokens=8)
    assert info.value.status == 400 and "maximum context length is 20" in str(info.value)
