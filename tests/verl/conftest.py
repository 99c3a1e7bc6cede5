"""Shared fixtures of the verl-backend tests: verl's real classes (imported once per session: the import
takes seconds), a real byte-level BPE tokenizer trained on tool-world text, tool-world tasks written as
verl parquet and read back through verl's own RLHFDataset, and a scripted stand-in for verl's LLM
server manager.

The server manager is the one stub: verl's `server_manager.generate` talks to vLLM / SGLang servers on
GPUs, which cannot run here. `ScriptedServer` answers with verl's real `TokenOutput`, whose token ids
are the real tokenizer's encoding of scripted text, and records every call it gets.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from envace.toolcall import render_tool_call
from envace.types import Task

pytestmark = pytest.mark.verl


@pytest.fixture(scope="session")
def verl_api():
    """The plugin (it registers envace) and the verl classes the tests use."""
    from verl.experimental.agent_loop import agent_loop
    from verl.protocol import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1 import trainer_base
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.workers.rollout.replica import TokenOutput

    from envace.trainers import verl_plugin

    assert verl_plugin.REGISTERED == list(verl_plugin.PIECES), verl_plugin.REGISTERED
    return {"agent_loop": agent_loop, "DataProto": DataProto, "core_algos": core_algos, "trainer_base": trainer_base,
            "RLHFDataset": RLHFDataset, "TokenOutput": TokenOutput}


@pytest.fixture(scope="session")
def world_tasks() -> list[Task]:
    from envace.worlds.generator import generate_tasks

    return generate_tasks(12, "train", 0)


@pytest.fixture(scope="session")
def tokenizer(world_tasks):
    from envace.models.corpus import task_strings
    from envace.models.tokenizer import train_tokenizer

    return train_tokenizer([s for t in world_tasks for s in task_strings(t)], vocab_size=1024)


@pytest.fixture(scope="session")
def parquet_path(world_tasks, tmp_path_factory):
    from envace.trainers.verl.dataset import export_verl_dataset

    return export_verl_dataset(world_tasks, tmp_path_factory.mktemp("verl_data") / "train.parquet")


@pytest.fixture(scope="session")
def rl_dataset(verl_api, parquet_path, tokenizer):
    from envace.trainers.verl.dataset import load_rlhf_dataset

    return load_rlhf_dataset(parquet_path, tokenizer)


@pytest.fixture(scope="session")
def verl_config_factory(parquet_path):
    """verl's real `ppo_trainer` config composed with the launcher's overrides (+ extra ones). Hydra composes
    each distinct override list once (~1 s each); every call gets its own copy."""
    import copy

    from envace.trainers.verl.config import VerlLaunchConfig
    from envace.trainers.verl.launcher import build_overrides, compose_verl_config

    composed: dict[tuple[str, ...], Any] = {}

    def make(*extra: str, **launch: Any):
        cfg = VerlLaunchConfig(model="/nonexistent/tiny", train_files=[str(parquet_path)], nnodes=1,
                               n_gpus_per_node=1, max_prompt_length=1024, rollout_prompt_length=4096,
                               max_response_length=256, max_model_len=8192, **launch)
        overrides = tuple(build_overrides(cfg) + list(extra))
        if overrides not in composed:
            composed[overrides] = compose_verl_config(list(overrides))
        return copy.deepcopy(composed[overrides])

    return make


def _gold_act_texts(task: Task) -> list[str]:
    """The text of each reference assistant message, as the Act role would write it."""
    out = []
    for m in task.messages:
        if m.role == "assistant":
            out.append("\n".join(render_tool_call(c) for c in m.tool_calls) if m.tool_calls else m.content)
    return out


class ScriptedServer:
    """Stand-in for verl's LLM server client: Act calls get the next scripted Act text, Rehearse calls get
    the reference response of the call being simulated. Records (prompt_ids, sampling_params, kind).
    (A plain class: hydra.utils.instantiate would turn a dataclass argument into a DictConfig.)"""

    def __init__(self, tokenizer: Any, token_output: Any, task: Task, act_texts: list[str]) -> None:
        self.tokenizer, self.token_output, self.task, self.act_texts = tokenizer, token_output, task, act_texts
        self.calls: list[dict[str, Any]] = []

    def _rehearse_text(self, prompt: str) -> str:
        from envace.roles.rehearse import few_shot_triples, render_execution_result

        tail = prompt.split("Current tool to simulate:", 1)[1]
        name = tail.split("name: ", 1)[1].split("\n", 1)[0].strip()
        args = json.loads(tail.split("arguments: ", 1)[1].split("\n", 1)[0].split("<|im_end|>")[0])
        for n, a, response in few_shot_triples(self.task):
            if n == name and a == args:
                return render_execution_result(response)
        return render_execution_result({"error_tool_call": {"code": "UNKNOWN", "message": "not scripted"}})

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> Any:
        prompt = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        rehearse = "Current tool to simulate:" in prompt
        text = self._rehearse_text(prompt) if rehearse else self.act_texts.pop(0)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if not rehearse:
            ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        logprobs = [-0.01 * (i + 1) for i in range(len(ids))]
        self.calls.append({"kind": "rehearse" if rehearse else "act", "prompt_ids": list(prompt_ids),
                           "sampling_params": dict(sampling_params), "request_id": request_id,
                           "response_ids": ids, "logprobs": logprobs})
        return self.token_output(token_ids=ids, log_probs=logprobs, stop_reason="completed",
                                 extra_fields={"global_steps": 3, "min_global_steps": 3, "max_global_steps": 3})


@pytest.fixture
def scripted_server(verl_api, tokenizer):
    def make(task: Task, act_texts: list[str] | None = None) -> ScriptedServer:
        return ScriptedServer(tokenizer, verl_api["TokenOutput"], task,
                              list(_gold_act_texts(task) if act_texts is None else act_texts))

    return make


@pytest.fixture
def gold_act_texts():
    return _gold_act_texts


BASE_PARAMS = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


@pytest.fixture
def run_session(verl_api):
    """Run one session as verl's V1 worker does: instantiate the registered loop inside the running event
    loop (hydra.utils.instantiate of the registry entry) and await run() with the row's fields."""
    import asyncio

    import hydra

    al = verl_api["agent_loop"]

    def run(config, server, tokenizer, sample, session_id=0, uid="uid-a", global_steps=3):
        async def go():
            loop = hydra.utils.instantiate(
                config=al._agent_loop_registry["envace_agent"], trainer_config=al.DictConfigWrap(config),
                server_manager=server, tokenizer=tokenizer, processor=None, hf_model_type=None,
                dataset_cls=verl_api["RLHFDataset"], data_config=al.DictConfigWrap(config.data),
                tools=al.ToolListWrap([]))
            return await loop.run(dict(BASE_PARAMS), **sample, uid=uid, session_id=session_id,
                                  global_steps=global_steps)

        return asyncio.run(go())

    return run


@pytest.fixture(scope="module")
def transfer_queue():
    """A local Ray and verl's TransferQueue (SimpleStorage), per test module."""
    import ray
    import transfer_queue as tq
    from omegaconf import OmegaConf

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield tq
    tq.close()
    ray.shutdown()
