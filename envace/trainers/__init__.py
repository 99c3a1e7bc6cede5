"""Training: the embedded trainer (`embedded.train`, role-wise GRPO on one process) and SFT cold start
(`sft.sft`), their configs (`config`), and the verl backend (`verl/`). Import from the submodules: this
package imports nothing, so `envace.trainers.config` stays light."""
