"""The real tiny model served by `envace serve` (uvicorn on 127.0.0.1) runs BFCL entries end to end over HTTP
through OpenAIPolicy: single-turn AST, irrelevance and a multi-turn entry executed against BFCL's backends.
A random model scores whatever it scores; the test checks the pipeline produced valid records."""

from __future__ import annotations

import json

import pytest

from envace.benchmarks.base import BenchmarkResult
from envace.benchmarks.bfcl import BFCLBenchmark
from envace.benchmarks.report import report_table
from envace.engines.chat_model import LocalChatModel
from envace.engines.openai_client import OpenAIChatClient, OpenAIPolicy
from envace.engines.server import background_server, create_app

pytestmark = pytest.mark.usefixtures("bfcl_modules")

CATEGORIES = ["simple_python", "irrelevance", "multi_turn_base"]
# BFCL prompts outgrow the tiny model's 1024 positions; the test checks the pipeline, not the scores, so the
# server is told to accept longer prompts (`envace serve --max-model-len`), as a user would for such a model.
LONG_CONTEXT = 32768


@pytest.mark.slow
def test_tiny_model_over_http_end_to_end(bench_tiny_dir, tmp_path):
    chat = LocalChatModel.from_dir(bench_tiny_dir, name="tiny", device="cpu")
    with background_server(create_app(chat=chat, max_model_len=LONG_CONTEXT)) as url:
        policy = OpenAIPolicy(OpenAIChatClient(url, "tiny", timeout=120), temperature=1.0, max_tokens=16)
        result = BFCLBenchmark(CATEGORIES, out_dir=tmp_path).run(policy, limit=1, seed=3)
    assert [r["category"] for r in result.records] == CATEGORIES
    for r in result.records:
        assert isinstance(r["valid"], bool) and not r["inference_error"], json.dumps(r, default=str)[:3000]
        assert r["queries"] >= 1 and r["input_tokens"] > 0 and r["output_tokens"] >= r["queries"]
        json.dumps(r)  # records are JSON
    multi = result.records[2]
    assert isinstance(multi["result"], list) and len(multi["result"]) >= 1  # per-turn step responses
    for cat in CATEGORIES:
        s = result.categories[cat]
        assert s.entries == 1 and s.total == 1 and s.accuracy in (0.0, 1.0)
    assert result.models["policy"] == f"tiny @ {url}/v1"
    assert 0.0 <= result.overall <= 1.0
    (saved,) = tmp_path.glob("bfcl_*.json")
    assert BenchmarkResult.load(saved).records == result.records
    text = report_table([result], label="tiny (random)")
    assert "EnvACE-8B (paper) | 46.04 | 36.70 | 16.00 | 32.91" in text
    assert "Overall not shown" in text and "departure:" in text
