"""The demo's SFT samples built in two halves, the second in the side process: the same samples, in the same
order, as one process builds."""

from __future__ import annotations

from envace.demo import _task_samples_in_two
from envace.models.loading import load_policy
from envace.side_process import SideProcess
from envace.trainers.config import SFTConfig
from envace.trainers.sft_samples import build_samples
from envace.worlds.generator import generate_tasks


def test_samples_built_in_two_processes_are_the_samples_one_process_builds(tiny_dir):
    tok = load_policy(tiny_dir)[1]
    tasks = generate_tasks(19, "train", 3)
    cfg = SFTConfig(model=str(tiny_dir), error_demos=0.5, max_len=8192)  # this tokenizer was not fit to tool JSON
    want = build_samples(tasks, tok, cfg)
    assert len(want[0]) == len(tasks) and len(want[1]) > len(tasks)
    with SideProcess(jobs=2) as side:
        got = build_samples(tasks, tok, cfg, _task_samples_in_two(side))
    for role in (0, 1):
        assert [(s.role, s.ids, s.is_target) for s in got[role]] == [(s.role, s.ids, s.is_target) for s in want[role]]
