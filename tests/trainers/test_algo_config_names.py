"""AlgoConfig takes its valid algorithm names from the algos registries, not from a copied list."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from envace.algos import ADVANTAGES, AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES, grpo_advantages
from envace.trainers.config import AlgoConfig

FAMILIES = [("advantage", ADVANTAGES), ("loss", POLICY_LOSSES), ("agg", AGGREGATIONS), ("kl_kind", KL_ESTIMATORS)]


@pytest.mark.parametrize("key,registry", FAMILIES)
def test_every_registered_name_is_accepted(key, registry):
    for name in registry.names():
        assert getattr(AlgoConfig(**{key: name}), key) == name


def test_unknown_name_names_the_field_and_the_valid_names():
    with pytest.raises(ValidationError) as e:
        AlgoConfig(advantage="ppo")
    msg = str(e.value)
    assert "algo.advantage='ppo'" in msg
    # the estimators registered in envace/algos/advantages.py and envace/algos/moving_baseline.py
    assert "valid names: grpo, role_grpo, role_moving_average" in msg


def test_a_newly_registered_name_is_valid_without_touching_the_config():
    with pytest.raises(ValidationError):
        AlgoConfig(advantage="grpo_copy_for_test")
    ADVANTAGES.register("grpo_copy_for_test")(grpo_advantages)
    try:
        assert AlgoConfig(advantage="grpo_copy_for_test").advantage == "grpo_copy_for_test"
    finally:
        ADVANTAGES.remove("grpo_copy_for_test")
