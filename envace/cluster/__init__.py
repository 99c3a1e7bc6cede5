"""Beyond one machine: a local Ray head for tests and laptops (`ray_head`), verl checkpoints merged to HF
dirs (`checkpoints`), a merged checkpoint served for its evaluation (`serving`), and the steps of the
cluster pipeline flow (`pipeline`; the flow itself is flows/cluster_pipeline.py). Sweep cells on a Ray
cluster live with the sweeps (envace/sweeps/ray_runner.py)."""
