"""`envace eval` as a user sees it (a subprocess): what it prints while and after a run, and the one line
plus exit status of each bad input (a dead judge or policy endpoint, an over-long prompt, a folder that is
no VitaBench checkout, FinMCP data that is not JSON), and `--gold`. The random tiny model (1024
positions) plays the policy; a port nobody listens on plays the dead endpoint."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bench"


def envace(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ENVACE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "envace.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def _dead_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/v1"


def _errors(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error: ")]


@pytest.mark.slow
def test_a_small_bfcl_run_prints_progress_a_table_and_where_the_results_are(tiny_dir, tmp_path):
    out = tmp_path / "out"
    proc = envace("eval", str(tiny_dir), "--benchmarks", "bfcl", "bench.bfcl_categories=[simple_python,irrelevance]",
                  "bench_limit=2", "-k", "1", "policy.max_tokens=8", "device=cpu", "threads=1", f"out_dir={out}",
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = proc.stderr.splitlines()
    assert err[0] == f"envace eval: bfcl; results go to {out / 'eval.json'}"  # before anything runs
    assert err[-2].startswith("bfcl    [########################] 4/4 task runs, 0 errors, took ")
    assert err[-1] == "bfcl: no task errored (4 task runs)"
    data = json.loads((out / "eval.json").read_text())
    res = data["benchmarks"]["results"]["bfcl"]
    cats = {c: 100 * res["categories"][c]["accuracy"] for c in ("simple_python", "irrelevance")}
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["benchmark", "metric", "value", "n", "errors"]
    assert lines[1].split() == ["bfcl", "overall", "(offline)", f"{100 * res['overall']:.2f}", "4", "0"]
    assert [line.split() for line in lines[2:4]] == [["simple_python", f"{cats['simple_python']:.2f}", "2", "0"],
                                                     ["irrelevance", f"{cats['irrelevance']:.2f}", "2", "0"]]
    size = (out / "eval.json").stat().st_size / 1024
    assert lines[4] == f"wrote {out / 'eval.json'} ({size:.1f} KB)" and len(lines) == 5  # no results dump


@pytest.mark.slow
def test_bad_inputs_each_get_one_line_and_a_failing_exit(tiny_dir, tmp_path):
    dead = _dead_url()
    (tmp_path / "notjson.txt").write_text("this is not json {")
    (tmp_path / "docs").mkdir()
    vita = FIXTURES / "vitabench"
    common = ["bench_limit=1", "-k", "1", "device=cpu", "threads=1"]
    cases = {
        "dead judge": (["eval", str(tiny_dir), "--benchmarks", "vita", "--vita", str(vita), f"judge.base_url={dead}",
                        "judge.model=judge", *common], 2,
                       f"error: judge endpoint {dead} (model judge) failed a probe chat completion: POST {dead}"),
        "dead policy": (["eval", "--benchmarks", "bfcl", f"policy.base_url={dead}", "policy.model=m", *common], 2,
                        f"error: policy endpoint {dead} (model m) failed a probe chat completion: POST {dead}"),
        "over-long prompt": (["eval", str(tiny_dir), "--benchmarks", "tau2", "bench.tau2_domains=[airline]",
                              "policy.max_tokens=8", *common], 3,
                             "error: tau2: all 1 task runs failed before a score was measured: ended context x1 "
                             "(e.g. 2: this model's maximum context length is 1024 tokens; the prompt has "),
        "no vita checkout": (["eval", str(tiny_dir), "--benchmarks", "vita", "--vita", str(tmp_path / "docs"),
                              "--judge", str(tiny_dir)], 2,
                             f"error: {tmp_path / 'docs'} is not a VitaBench checkout (paths.vita): a VitaBench "
                             "checkout (git clone https://github.com/meituan-longcat/vitabench) holds src/vita/"),
        "non-JSON finmcp": (["eval", str(tiny_dir), "--benchmarks", "finmcp", "--finmcp",
                             str(tmp_path / "notjson.txt")], 2,
                            f"error: {tmp_path / 'notjson.txt'}: neither a JSON array nor JSON Lines (Expecting value:"
                            " line 1 column 1 (char 0)) (paths.finmcp): set paths.finmcp to the FinMCP-Bench file"),
    }
    for name, (args, code, start) in cases.items():
        proc = envace(*args, f"out_dir={tmp_path / name.replace(' ', '_')}", cwd=tmp_path)
        errors = _errors(proc)
        assert proc.returncode == code, (name, proc.returncode, proc.stderr[-2000:])
        assert len(errors) == 1 and errors[0].startswith(start), (name, errors)
        assert "Traceback" not in proc.stderr, name
    # a failed probe stops the run before any task: nothing was written
    assert not (tmp_path / "dead_judge" / "eval.json").exists()
    assert (tmp_path / "over-long_prompt" / "eval.json").is_file()  # a run that measured nothing is still recorded


@pytest.mark.slow
def test_gold_replays_pass_and_vita_is_listed_without_gold(tmp_path):
    fin = FIXTURES / "finmcp" / "benchmark_synthetic.json"
    proc = envace("eval", "--gold", "--benchmarks", "bfcl,finmcp,vita", "--finmcp", str(fin), "--vita",
                  str(FIXTURES / "vitabench"), "bench.bfcl_categories=[simple_python,multi_turn_base]", "bench_limit=2",
                  f"out_dir={tmp_path / 'gold'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()[1:]}
    n_fin = len(json.loads(fin.read_text()))
    assert rows == {"bfcl": "4/4", "finmcp": f"{n_fin}/{n_fin}", "vita": "—"}
    saved = json.loads((tmp_path / "gold" / "gold.json").read_text())
    assert saved["bfcl"]["passed"] == 4 and saved["vita"]["note"].startswith("no gold replay")
