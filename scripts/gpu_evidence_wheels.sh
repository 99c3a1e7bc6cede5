#!/usr/bin/env bash
# Prepare the wheels scripts/gpu_evidence.sh carries to a GPU machine with no network (CPython 3.12,
# x86_64 manylinux): the packages envace's embedded path imports that the machine lacks, and verl with what
# its FSDP worker's imports need there (the verl_memory stage; Ray is not carried: the stage writes an
# import-only ray), at the versions this checkout's environment runs. Binary wheels come from `pip download` for cp312 manylinux; packages
# published only as sdists (antlr4-python3-runtime, omegaconf's parser runtime) are built with `pip wheel`
# (pure Python, py3-none-any). Then the total is checked against the 64 MiB a device run may carry.
#
#   bash scripts/gpu_evidence_wheels.sh [OUT_DIR]          (default build/gpu_wheels)
#   bash scripts/gpu_evidence_wheels.sh --check DIR        (only the size check)
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT_MIB=${ENVACE_CARRY_LIMIT_MIB:-64}

check() {  # check DIR: the carried total must stay under the limit
  local bytes
  bytes=$(find "$1" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  local mib
  mib=$(awk -v b="$bytes" 'BEGIN {printf "%.2f", b / 1048576}')
  if awk -v b="$bytes" -v l="$LIMIT_MIB" 'BEGIN {exit !(b < l * 1048576)}'; then
    echo "carried wheels: $mib MiB in $1 (limit $LIMIT_MIB MiB): ok"
  else
    echo "FAIL: carried wheels are $mib MiB in $1, over the $LIMIT_MIB MiB a device run may carry"
    return 1
  fi
}

if [ "${1:-}" = "--check" ]; then check "$2"; exit $?; fi
OUT=${1:-build/gpu_wheels}
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
mkdir -p "$OUT"
rm -f "$OUT"/*.whl
pin() { "$PY" -c "import importlib.metadata as m, sys; print(f'{sys.argv[1]}=={m.version(sys.argv[1])}')" "$1"; }
BINARY=("$(pin pydantic)" "$(pin pydantic-core)" "$(pin annotated-types)" "$(pin typing-inspection)"
        "$(pin omegaconf)" "$(pin orjson)"
        # verl_memory: verl's engine worker imports these at module level (found by importing
        # verl.workers.engine_workers with only the GPU image's packages present)
        "$(pin verl)" "$(pin tensordict)" "$(pin pyvers)" "$(pin codetiming)" "$(pin hydra-core)" "$(pin uvicorn)"
        "$(pin fastapi)" "$(pin starlette)" "$(pin opentelemetry-api)" "$(pin datasets)" "$(pin multiprocess)"
        "$(pin dill)")
SDIST=("$(pin antlr4-python3-runtime)")
echo "binary wheels (cp312 manylinux x86_64): ${BINARY[*]}"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$OUT" --implementation cp --python-version 3.12 \
    --abi cp312 --abi abi3 --abi none --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any "${BINARY[@]}"
echo "built from sdists: ${SDIST[*]}"
"$PY" -m pip wheel --quiet --no-deps --no-binary=:all: --wheel-dir "$OUT" "${SDIST[@]}"
ls -l "$OUT"
check "$OUT"
