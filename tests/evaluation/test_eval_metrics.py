"""Evaluation results become flat MLflow metrics, including rehearsal fidelity per tool."""

from envace.evaluation.run import eval_metrics, resolve_model_dir


def test_eval_metrics_flatten_world_and_fidelity_per_tool():
    results = {"world": {
        "success": 0.5, "reward": 0.75, "tool_call_validity": 1.0,
        "per_domain": {"shop": {"success": 1.0, "reward": 1.0}, "bank": {"success": 0.0, "reward": 0.5}},
        "fidelity": {"per_tool": {
            "get_stock": {"tool": "get_stock", "n": 3, "json_valid": 1.0, "schema_ok": 1.0, "exact_match": 2 / 3,
                          "field_f1": 0.9},
            "deposit": {"tool": "deposit", "n": 1, "json_valid": 0.0, "schema_ok": 0.0, "exact_match": 0.0,
                        "field_f1": 0.0}}}}}
    m = eval_metrics(results)
    assert m["world/success"] == 0.5 and m["world/bank/reward"] == 0.5
    assert m["fidelity/get_stock/exact_match"] == 2 / 3
    # pooled over pairs: (3 * 2/3 + 1 * 0) / 4
    assert abs(m["fidelity/all/exact_match"] - 0.5) < 1e-12
    assert m["fidelity/all/n"] == 4.0
    assert not any(k.startswith("fidelity/determined/") for k in m)
    results["world"]["fidelity"].update({"determined_pairs": 2, "determined_json_valid": 1.0,
                                         "determined_schema_ok": 1.0, "determined_exact_match": 0.5,
                                         "determined_field_f1": 0.75})
    m = eval_metrics(results)
    assert m["fidelity/determined/exact_match"] == 0.5 and m["fidelity/determined/n"] == 2.0


def test_checkpoint_dirs_resolve_to_their_policy_model(tmp_path):
    (tmp_path / "step_000002" / "policy").mkdir(parents=True)
    (tmp_path / "step_000002" / "policy" / "config.json").write_text("{}")
    assert resolve_model_dir(tmp_path / "step_000002") == tmp_path / "step_000002" / "policy"
    assert resolve_model_dir(tmp_path / "other") == tmp_path / "other"
