import pytest

from envace.types import Mode, Trajectory


@pytest.fixture
def traj():
    def make(task, messages=None, mode=Mode.REHEARSE):
        return Trajectory(task=task, prompt_index=0, sample_index=0, mode=mode,
                          messages=list(task.messages if messages is None else messages))
    return make
