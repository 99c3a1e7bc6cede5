"""envace's verl parquet rows through verl's own RLHFDataset (and its collate_fn), back to Tasks."""

from __future__ import annotations

import pytest

from envace.trainers.verl.dataset import AGENT_NAME, load_rlhf_dataset, task_from_sample

pytestmark = pytest.mark.verl


def test_rows_load_through_rlhf_dataset(rl_dataset, world_tasks):
    assert len(rl_dataset) == len(world_tasks)
    for i, task in enumerate(world_tasks):
        row = rl_dataset[i]
        assert row["agent_name"] == AGENT_NAME and row["index"] == i
        assert [(m["role"], m["content"]) for m in row["raw_prompt"]] == \
            [(m.role, m.content) for m in task.messages[:2]]
        back = task_from_sample(row)
        assert back.uuid == task.uuid and back.domain == task.domain and back.tools == task.tools
        assert [m.to_openai() for m in back.messages] == [m.to_openai() for m in task.messages]
        assert back.checklists == task.checklists and back.initial_state == task.initial_state
        assert back.meta.get("answers") == task.meta.get("answers")


def test_collated_batch_rows_rebuild_tasks(verl_api, rl_dataset, world_tasks):
    from verl.utils.dataset.rl_dataset import collate_fn

    batch = collate_fn([rl_dataset[i] for i in range(3)])
    for i in range(3):  # what the agent loop gets: one element of each non-tensor column (numpy objects)
        sample = {k: v[i] for k, v in batch.items() if not hasattr(v, "shape") or v.dtype == object}
        assert task_from_sample(sample).uuid == world_tasks[i].uuid


def test_verl_length_filter_uses_the_real_chat_template(verl_api, parquet_path, tokenizer, tmp_path):
    kept = load_rlhf_dataset(parquet_path, tokenizer, filter_overlong_prompts=True, max_prompt_length=4096,
                             cache_dir=str(tmp_path / "a"))
    none = load_rlhf_dataset(parquet_path, tokenizer, filter_overlong_prompts=True, max_prompt_length=8,
                             cache_dir=str(tmp_path / "b"))
    assert (len(kept), len(none)) == (12, 0)
