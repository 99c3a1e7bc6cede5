"""envace: agentic reinforcement learning with world rehearsal (EnvACE).

One policy plays Act (tool calls) and Rehearse (the environment's responses); role-wise GRPO trains
both. See README.md and the module docstrings; heavy optional backends (verl, vllm, ray) are imported
only inside their own modules."""

__version__ = "0.1.0"
