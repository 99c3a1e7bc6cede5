"""Test-time rehearsal (TTS): before acting for real, N private rehearsals (Act + Rehearse episodes of the
policy itself, no environment), a review of each, and what the committed run is given, chosen by a memory
strategy; then ONE committed execution in the real environment.

- config.py: `TTSConfig` (n, mode, memory strategy and the other knobs, checked once), the N grids.
- strategies.py: the memory strategies by name (prose, calls_results, calls, best_of_n), one signature;
  structured.py: the parts of the memories built from a rehearsal (the best-reviewed one, its calls, a cap).
- phase.py: the private phase's records and what a strategy reads; prompts.py: reviews, the prose memory.
- private.py: the private phase (`rehearse_privately`); rollout.py: token level (`tts_rollout`, the tool
  world); chat.py: chat level (`TTSPolicy` for the benchmarks, `tts_chat_episode`).
- sft_data.py: SFT rows that teach these prompts (`SFTConfig.tts_prompts`; training tasks only).
The diagnosis (`envace tts diagnose`: oracle and placebo bounds) is envace.evaluation.tts_diagnosis.
"""

from envace.tts.config import DEFAULT_N_GRID, DEMO_N_GRID, MAX_N, TTS_MODES, TTSConfig, TTSMode
from envace.tts.private import rehearse_privately
from envace.tts.rollout import tts_rollout
from envace.tts.strategies import memory_names, memory_strategy, register_memory

__all__ = ["DEFAULT_N_GRID", "DEMO_N_GRID", "MAX_N", "TTS_MODES", "TTSConfig", "TTSMode", "memory_names",
           "memory_strategy", "register_memory", "rehearse_privately", "tts_rollout"]
