"""Training, in three wings:

- the embedded loop and its update: `embedded` (role-wise GRPO on one process: rollout, rows, `update_models`),
  `update` (PPO epochs x mini-batches over packed rows) with `train_rows`, `packing`, `micro_loss`, ...;
  SFT cold start (`sft`); their configs (`config`);
- the training arms (`arms/`): the hooks every arm implements, their registry, and one module per arm (echo,
  grounded, dynamic sampling, the shadow monitor, flip-sign); the loop calls them and names none;
- the verl backend (`verl/`, `verl_plugin`).

Import from the submodules: this package imports nothing, so `envace.trainers.config` stays light."""
