"""The skip check of .ci/run: every skipped test in the JUnit XML must be allowed below, or CI fails.

A skip hides a test that did not run; CI installs every test dependency (scripts/setup.sh and
scripts/system_deps.sh fail under CI=true when they cannot), so on CI a skip is a defect unless it is listed
here with the reason it cannot run on a CI machine. Prints the skip summary: how many were skipped, allowed
and unexpected, and each unexpected one with its reason.

    python .ci/skips.py /tmp/envace-ci-junit.xml
"""

from __future__ import annotations

import fnmatch
import os
import sys
import xml.etree.ElementTree as ET

# Skips allowed on CI, by marker (tests/conftest.py records a skipped test's markers) and by test id pattern
# (fnmatch over "path::name[params]"), each with the reason. Keep both short: each entry is a test CI never runs.
ALLOWED_MARKERS = {
    "gpu": "needs CUDA; CI runs on CPU machines (GPU checks: docs/gpu.md, scripts/gpu_smoke.sh)",
}
ALLOWED_IDS: dict[str, str] = {
    "tests/benchmarks/test_tau2_layouts.py::test_gold_replay_through_a_real_upstream_clone":
        "needs a sierra-research/tau2-bench clone (ENVACE_TAU2_CLONE), which CI cannot fetch; the same file "
        "tests the upstream user-simulator interface on a layout shaped like it",
}


def _test_id(classname: str, name: str) -> str:
    """pytest's node id from JUnit's dotted classname: the longest prefix that is a file, then classes."""
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if os.path.isfile(path):
            return "::".join([path, *parts[i:], name])
    return "::".join([classname, name])


def skipped_tests(path: str) -> list[tuple[str, str, set[str]]]:
    """(test id, skip message, markers) of every skipped test case in a JUnit XML report."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        skip = case.find("skipped")
        if skip is None:
            continue
        test_id = _test_id(case.get("classname", ""), case.get("name", ""))
        markers: set[str] = set()
        for prop in case.iter("property"):
            if prop.get("name") == "markers":
                markers |= {m for m in (prop.get("value") or "").split(",") if m}
        out.append((test_id, skip.get("message", ""), markers))
    return out


def allowed_reason(test_id: str, markers: set[str]) -> str | None:
    for marker, reason in ALLOWED_MARKERS.items():
        if marker in markers:
            return reason
    for pattern, reason in ALLOWED_IDS.items():
        if fnmatch.fnmatch(test_id, pattern):
            return reason
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    try:
        skipped = skipped_tests(argv[1])
    except (OSError, ET.ParseError) as exc:
        print(f"CI: cannot read the JUnit report {argv[1]}: {exc}; the skip check needs it", file=sys.stderr)
        return 1
    unexpected = [(t, msg) for t, msg, markers in skipped if allowed_reason(t, markers) is None]
    print(f"CI: skip summary: {len(skipped)} skipped, {len(skipped) - len(unexpected)} allowed, "
          f"{len(unexpected)} unexpected")
    for test_id, msg in unexpected:
        print(f"CI: unexpected skip: {test_id}: {msg}", file=sys.stderr)
    if unexpected:
        print("CI: a skipped test did not run; install what it needs, or allow it in .ci/skips.py with the reason",
              file=sys.stderr)
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
