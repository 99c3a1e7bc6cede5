#!/usr/bin/env bash
# Set up (venv + system packages) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system_deps.sh
bash scripts/setup.sh
source scripts/env.sh
exec .venv/bin/python -m pytest "$@"
