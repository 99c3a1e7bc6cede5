#!/usr/bin/env bash
# Set up (venv + system packages), lint, and run the whole test suite on every core. Extra arguments go to
# pytest. ENVACE_TEST_WORKERS sets the number of pytest-xdist workers (default: one per core; 0 runs the tests
# in this process). Each worker's torch uses one thread: two workers of two threads on two cores run several
# times slower than one alone.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system_deps.sh
bash scripts/setup.sh
source scripts/env.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -n "${ENVACE_TEST_WORKERS:-auto}" --dist loadgroup "$@"
