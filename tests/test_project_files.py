"""The files around the code say the same thing as the code: LICENSE is the Apache-2.0 text that pyproject and
CITATION.cff name, CITATION.cff carries the package's version and cites the EnvACE paper, and .ci/skips.py (the
skip check of .ci/run) fails on a skip it does not allow, on JUnit reports written by hand here."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest
import yaml

import envace

ROOT = Path(__file__).resolve().parents[1]


def _skips():
    spec = importlib.util.spec_from_file_location("ci_skips", ROOT / ".ci" / "skips.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_license_citation_and_pyproject_agree():
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"]
    assert "END OF TERMS AND CONDITIONS" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert project["license"] == "Apache-2.0" and cff["license"] == "Apache-2.0"
    assert cff["version"] == project["version"] == envace.__version__
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    paper = cff["preferred-citation"]
    assert paper["type"] == "article" and paper["url"] == "https://arxiv.org/abs/2608.06197"
    assert any(i["value"] == "arXiv:2608.06197" for i in paper["identifiers"])


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4" skipped="3">
<testcase classname="tests.test_project_files" name="test_ran" time="0.1"/>
<testcase classname="tests.test_project_files" name="test_gpu_only" time="0.0">
  <properties><property name="markers" value="gpu,slow"/></properties>
  <skipped type="pytest.skip" message="no CUDA">no CUDA</skipped></testcase>
<testcase classname="tests.test_project_files" name="test_needs_a_package[x]" time="0.0">
  <properties><property name="markers" value="parametrize"/></properties>
  <skipped type="pytest.skip" message="could not import 'pkg'">could not import 'pkg'</skipped></testcase>
<testcase classname="tests.test_project_files.TestGroup" name="test_in_a_class" time="0.0">
  <skipped type="pytest.skip" message="no server">no server</skipped></testcase>
</testsuite></testsuites>
"""


def test_the_skip_check_fails_on_a_skip_it_does_not_allow(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # test ids are resolved against the repository's files
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT)
    skips = _skips()
    assert [t for t, _, _ in skips.skipped_tests(str(report))] == [
        "tests/test_project_files.py::test_gpu_only",
        "tests/test_project_files.py::test_needs_a_package[x]",
        "tests/test_project_files.py::TestGroup::test_in_a_class"]
    assert skips.main(["skips.py", str(report)]) == 1
    out, err = capsys.readouterr()
    assert "CI: skip summary: 3 skipped, 1 allowed, 2 unexpected" in out
    assert "unexpected skip: tests/test_project_files.py::test_needs_a_package[x]: could not import 'pkg'" in err
    assert "test_gpu_only" not in err  # allowed by its gpu marker

    monkeypatch.setitem(skips.ALLOWED_IDS, "tests/test_project_files.py::test_needs_a_package*", "reason")
    monkeypatch.setitem(skips.ALLOWED_IDS, "tests/test_project_files.py::TestGroup::*", "reason")
    assert skips.main(["skips.py", str(report)]) == 0
    assert "CI: skip summary: 3 skipped, 3 allowed, 0 unexpected" in capsys.readouterr().out


@pytest.mark.parametrize("content", [None, "<testsuites><testsuite>"])
def test_the_skip_check_fails_without_a_readable_report(tmp_path, capsys, content):
    report = tmp_path / "junit.xml"
    if content is not None:
        report.write_text(content)
    assert _skips().main(["skips.py", str(report)]) == 1
    assert "cannot read the JUnit report" in capsys.readouterr().err
