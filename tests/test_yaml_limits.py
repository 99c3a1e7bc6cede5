"""Config YAML loading is bounded: alias "billion laughs" documents, oversize files and duplicate keys are a
one-line ConfigError naming the file and the fix, decided before any value is expanded. Merge keys and
ordinary aliases still load as PyYAML loads them."""

from __future__ import annotations

import resource

import pytest
import yaml

from envace.config import MAX_YAML_BYTES, MAX_YAML_VALUES, ConfigError, load_config, load_yaml
from envace.trainers.config import TrainConfig


def _laughs(depth: int, width: int = 10) -> str:
    lines = ['a0: &a0 ["lol"]']
    for i in range(1, depth + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + f"\nseed: 1\nnotes: *a{depth}\n"


@pytest.mark.parametrize("depth", [4, 6, 9])
def test_alias_bomb_is_refused_before_expansion(tmp_path, depth):
    path = tmp_path / "bomb.yaml"
    path.write_text(_laughs(depth))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, path)
    msg = str(err.value)
    assert str(path) in msg and f"more than {MAX_YAML_VALUES} values" in msg and "\n" not in msg
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 200, f"loading grew the peak RSS by {grown_mb:.0f} MB"


def test_small_aliases_and_merge_keys_still_load(tmp_path):
    path = tmp_path / "ok.yaml"
    text = "base: &b {lr: 0.1, k: 4}\nrun:\n  <<: *b\n  k: 8\nlist: &l [1, 2]\nagain: *l\n"
    path.write_text(text)
    assert load_yaml(path) == yaml.safe_load(text) == {"base": {"lr": 0.1, "k": 4}, "run": {"lr": 0.1, "k": 8},
                                                         "list": [1, 2], "again": [1, 2]}


def test_duplicate_keys_are_an_error_naming_both_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("seed: 1\nsteps: 3\nrollout:\n  mode: env\n  mode: rehearse\n")
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, path)
    msg = str(err.value)
    assert str(path) in msg and "line 5: duplicate key 'mode' (first on line 4)" in msg and "\n" not in msg


def test_oversize_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "big.yaml"
    with path.open("wb") as f:
        f.truncate(MAX_YAML_BYTES + 1)  # sparse: nothing to parse, only the size is looked at
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, path)
    _one_line_budget_error(err, str(path), f"is {MAX_YAML_BYTES + 1} bytes, over the limit of {MAX_YAML_BYTES}",
                           "ENVACE_MAX_YAML_BYTES")


def test_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("notes: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_yaml(path)


# ----- the same bounds for `key=value` overrides, long strings and ${...} references ------------------------


def _flow_laughs(depth: int, width: int = 10) -> str:
    """The alias bomb as one flow-style YAML value (what a `key=value` override carries)."""
    items = ["&a0 [lol]"] + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, depth + 1)]
    return "[" + ", ".join(items) + "]"


def _one_line_budget_error(err: pytest.ExceptionInfo, where: str, amount: str, setting: str) -> str:
    msg = str(err.value)
    assert where in msg and amount in msg and setting in msg and "\n" not in msg, msg
    return msg


@pytest.mark.timeout(120)  # a guard: without the bound this override runs for minutes
def test_alias_bomb_as_an_override_is_refused_before_expansion():
    value = _flow_laughs(6)
    assert len(value) < 400  # ~350 characters that expand to over a million values
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, None, ["seed=1", f"notes={value}"])
    _one_line_budget_error(err, "override notes", f"more than {MAX_YAML_VALUES} values", "ENVACE_MAX_YAML_VALUES")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 200, f"the override grew the peak RSS by {grown_mb:.0f} MB"


@pytest.mark.timeout(120)
def test_a_long_string_reached_through_many_aliases_is_refused_by_its_characters(tmp_path):
    from envace.input_budget import YAML_CHARS

    text = 's: &s "' + "x" * 1_000_000 + '"\nl: [' + ", ".join(["*s"] * 100) + "]\n"  # 101 values, 10^8 characters
    path = tmp_path / "long.yaml"
    path.write_text(text)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, path)
    _one_line_budget_error(err, str(path), f"more than {YAML_CHARS.default} characters", "ENVACE_MAX_YAML_CHARS")
    with pytest.raises(ConfigError) as err:  # the same through an override
        load_config(TrainConfig, None, ['notes=[&s "' + "x" * 1_000_000 + '", ' + ", ".join(["*s"] * 100) + "]"])
    _one_line_budget_error(err, "override notes", "characters", "ENVACE_MAX_YAML_CHARS")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 200, f"loading grew the peak RSS by {grown_mb:.0f} MB"


@pytest.mark.timeout(120)
def test_an_interpolation_bomb_is_refused_before_it_is_resolved(tmp_path):
    lines = ["a0: [lol]"] + [f"a{i}: [" + ", ".join([f'"${{a{i - 1}}}"'] * 10) + "]" for i in range(1, 7)]
    path = tmp_path / "refs.yaml"
    path.write_text("\n".join(lines) + "\nseed: 1\n")
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, path)
    _one_line_budget_error(err, str(path), f"more than {MAX_YAML_VALUES} values", "ENVACE_MAX_YAML_VALUES")
    assert "${...} references" in str(err.value)


def test_small_references_and_relative_references_still_resolve(tmp_path):
    path = tmp_path / "refs.yaml"
    path.write_text("model: m\nseed: 3\nsteps: ${seed}\nrollout:\n  max_calls_per_turn: 5\n"
                    "  max_assistant_turns: ${.max_calls_per_turn}\n")
    cfg = load_config(TrainConfig, path, ["save_every=${steps}"])
    assert (cfg.seed, cfg.steps, cfg.save_every, cfg.rollout.max_assistant_turns) == (3, 3, 3, 5)


@pytest.mark.parametrize("source", ["file", "override"])
def test_duplicate_keys_in_a_flow_mapping_are_an_error(tmp_path, source):
    if source == "file":
        path = tmp_path / "flow.yaml"
        path.write_text("model: m\nrollout: {mode: rehearse, mode: env}\n")
        args, where = (path, []), f"{path}: line 2, column 27"
    else:
        args, where = (None, ["model=m", "rollout={mode: rehearse, mode: env}"]), "override rollout: line 1, column 18"
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, *args)
    msg = str(err.value)
    assert where in msg and "duplicate key 'mode' (first at column" in msg and "\n" not in msg, msg


def test_the_setting_changes_the_limit_and_a_bad_setting_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "small.yaml"
    path.write_text("model: m\nnotes: &n [" + ", ".join(["x"] * 30) + "]\nagain: *n\n")  # 65 values
    monkeypatch.setenv("ENVACE_MAX_YAML_VALUES", "50")
    with pytest.raises(ConfigError, match="more than 50 values"):
        load_config(TrainConfig, path)
    monkeypatch.setenv("ENVACE_MAX_YAML_VALUES", "1_000")
    with pytest.raises(ConfigError) as err:  # now it loads, and validation names the unknown field
        load_config(TrainConfig, path)
    assert "notes" in str(err.value) and "values" not in err.value.what
    monkeypatch.setenv("ENVACE_MAX_YAML_VALUES", "lots")
    with pytest.raises(ValueError, match="ENVACE_MAX_YAML_VALUES='lots' is not a positive integer"):
        load_config(TrainConfig, path)
