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


@pytest.mark.parametrize("depth", [5, 6, 9])
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
    with pytest.raises(ConfigError, match="over the .*-byte limit"):
        load_config(TrainConfig, path)


def test_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("notes: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_yaml(path)
