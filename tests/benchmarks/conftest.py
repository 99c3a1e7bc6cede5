"""Fixtures for the benchmark tests: BFCL's package (tests skip with the install command when it is
absent) and one tiny model dir per session for end-to-end runs through `envace serve`."""

from __future__ import annotations

import json

import pytest
import torch


@pytest.fixture(scope="session")
def bench_tiny_dir(tmp_path_factory):
    """A random tiny Qwen3 model whose tokenizer saw chat- and tool-shaped text."""
    torch.set_num_threads(1)
    from envace.models.tiny import TinyModelConfig, init_tiny_model

    corpus = []
    for i in range(60):
        call = json.dumps({"name": "cd", "arguments": {"folder": f"dir{i}"}})
        corpus.append(f"<|im_start|>user\nMove into dir{i} and list the files.<|im_end|>\n"
                      f"<|im_start|>assistant\n<tool_call>\n{call}\n</tool_call><|im_end|>\n"
                      f"<|im_start|>user\n<tool_response>\n{{\"current_working_directory\": \"dir{i}\"}}"
                      f"\n</tool_response><|im_end|>")
    return init_tiny_model(corpus, tmp_path_factory.mktemp("bench") / "tiny", TinyModelConfig(seed=0))
