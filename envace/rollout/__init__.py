"""The episode state machine: K episodes per task in modes rehearse | env | simulator.

`run_rollout` is the entry point; `derive_seed` gives every generation a stable seed. Test-time
rehearsal (envace.tts) is built on top of `run_rollout`.
"""

from envace.rollout.machine import run_rollout
from envace.rollout.seeds import derive_seed
from envace.rollout.state import EpisodeState, Phase

__all__ = ["EpisodeState", "Phase", "derive_seed", "run_rollout"]
