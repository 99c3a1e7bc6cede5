import pytest

from envace.types import Mode, Trajectory
from envace.worlds import generate_tasks

N_PER_SPLIT = 360  # >= 300 per split, a multiple of the 18 (domain, shape) combinations


@pytest.fixture(scope="session")
def split_tasks():
    return {split: generate_tasks(N_PER_SPLIT, split, seed=11) for split in ("train", "val", "test")}


@pytest.fixture
def traj():
    def make(task, messages=None):
        return Trajectory(task=task, prompt_index=0, sample_index=0, mode=Mode.ENV,
                          messages=list(task.messages if messages is None else messages))
    return make
