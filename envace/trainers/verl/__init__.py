"""The distributed backend: EnvACE as a plugin for stock verl 0.9.1 on Ray, with vLLM (or SGLang) rollout.

Modules (verl, ray and transfer_queue are imported only inside them, through `deps.require`):
- agent_loop: the `envace_agent` loop (one AgentLoopOutput per role call, reward set by the loop);
- advantage: role-wise GRPO on verl's data structures + the `envace_role_grpo` estimator;
- trainer: the V1 trainer `trainer_mode=envace` (role-wise advantages, one update per step);
- reward: `compute_score` for verl's reward path; dataset: verl rows <-> envace Tasks;
- launcher: Hydra overrides and the `python -m verl.trainer.main_ppo` command; config: both configs;
- preflight: the checks before main_ppo starts; memory: the dry run's log-prob / update memory estimate;
- per_role / rollout_names: the Rehearse actor of `policy=per_role` and its own rollout name;
- temperature / logits: per-row log-prob temperatures, the fp32 temperature division in verl's engine;
- schedule: epochs reconciled with the steps on the rows verl keeps.
`envace.trainers.verl_plugin` imports the registering modules into every verl process.
This package's own import is light on purpose.
"""
