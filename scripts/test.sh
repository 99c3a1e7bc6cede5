#!/usr/bin/env bash
# Set up (venv + system packages), lint, and run the test suite on every core. By default the tests marked
# `slow` (the long forms: verl's trainer end to end, whole benchmark replays, Prefect/Ray sweeps killed mid-run,
# each with a quick form that stays in) are left out; `--full` as the first argument runs them too (CI does).
# Other arguments go to pytest. ENVACE_TEST_WORKERS sets the number of pytest-xdist workers (default: one per
# core; 0 runs the tests in this process). Each worker's torch uses one thread: two workers of two threads on
# two cores run several times slower than one alone.
set -euo pipefail
cd "$(dirname "$0")/.."
select=(-m "not slow")
if [ "${1:-}" = "--full" ]; then
  select=()
  shift
fi
bash scripts/system_deps.sh
bash scripts/setup.sh
source scripts/env.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -n "${ENVACE_TEST_WORKERS:-auto}" --dist loadgroup "${select[@]}" "$@"
