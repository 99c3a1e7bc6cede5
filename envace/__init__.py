"""envace: agentic reinforcement learning with world rehearsal (EnvACE).

One policy plays Act (tool calls) and Rehearse (the environment's responses); role-wise GRPO trains
both. See README.md and the module docstrings; heavy optional backends (verl, vllm, ray) are imported
only inside their own modules.

Layers, bottom to top. A module imports its own layer and the layers below, never one above
(tests/test_import_layers.py checks every import in envace/, flows/ and dashboard/ against this list):

  1. records and parsers: types secrets untrusted input_budget yaml_bounds chat_tokens config toolcall
       execution_result conversation fidelity extras registry provenance
  2. pure parts: algos worlds roles cpu_memory cpu_threads thread_shards side_process
  3. inputs: rewards models data
  4. services: engines store tracking
  5. episodes: rollout
  6. test-time rehearsal: tts
  7. consumers: benchmarks trainers
  8. evaluation: evaluation
  9. drivers: sweeps cluster pipeline demo cli_errors dashboard_launch worldbench
 10. apps: flows dashboard
 11. entry point: cli_sweep cli
"""

__version__ = "0.1.0"
