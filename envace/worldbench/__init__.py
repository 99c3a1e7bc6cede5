"""worldbench: how well a model predicts what real tool environments answer.

Real transitions (tool schemas, the conversation so far, one call, the environment's real response) are
recorded from environments that execute (τ²-Bench, BFCL-v4 multi-turn, a VitaBench checkout, the
built-in tool world), gold calls and perturbed ones (`build`); a model slot, or a reference row that
needs no model, predicts each response through the Rehearse prompt (`predict`); `score` compares the
prediction with the real response and aggregates per tool, domain and source with bootstrap intervals;
`report` writes worldbench.json, MLflow and the store.
"""
