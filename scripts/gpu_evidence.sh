#!/usr/bin/env bash
# GPU evidence of envace's embedded path on one CUDA machine with no network, in at most 8 minutes:
# writes OUT/summary.json and OUT/logs/<stage>.log.
#
#   bash scripts/gpu_evidence.sh [--dry-run] [OUT]          (default OUT: gpu_evidence_out)
#
# Stages (scripts/gpu_evidence.py has the details), each with its own time limit:
#   preflight     nvidia-smi, versions, imports; any failure fails the run (nothing else runs after it)
#   parity        tiny model log-probs CPU vs CUDA at T 1.0 and 0.01
#   embedded_rl   3 embedded RL steps on CUDA (s/step, peak GB)
#   engines       random-init Qwen3-0.6B-shaped bf16: fast engine vs HFEngine vs model.generate
#                 (32 x 512 prompt x 128 new tokens) and the packed update's fwd+bwd on 8 x 2048 tokens
#   logits_probe  an 8B-sized LM head at growing token counts, verl's log-prob step (peak GB, first OOM)
#   verl_memory   verl's FSDP actor (2-layer Qwen3-8B shape): old log-probs + one update of an EnvACE row mix,
#                 with / without envace's padding bound, peak GB or OOM next to envace's estimate; its log is
#                 OUT/logs/verl_memory.log.gz (verl is verbose)
# Wheels: the machine lacks pydantic, pydantic-core, annotated-types, typing-inspection, omegaconf (+antlr4)
# and orjson, and, for verl_memory, verl and the packages its FSDP worker imports (no Ray: that stage writes
# an import-only ray); scripts/gpu_evidence_wheels.sh prepares them (cp312 manylinux) under build/gpu_wheels,
# which this script installs into OUT/site with --no-index (ENVACE_WHEELS=DIR for another place).
# --dry-run: the same stages on CPU at toy sizes (the CPU test of this script); nothing it prints is a GPU
# number, and summary.json says "dry_run": true.
# Exit 0 only when every stage is "ok".
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=()
if [ "${1:-}" = "--dry-run" ]; then DRY=(--dry-run); shift; fi
OUT=$(mkdir -p "${1:-gpu_evidence_out}" && cd "${1:-gpu_evidence_out}" && pwd)
mkdir -p "$OUT/logs" "$OUT/stages"
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
WHEELS=${ENVACE_WHEELS:-build/gpu_wheels}
start=$(date +%s)

summary() {  # summary STATUS_NOTE: merge the stage files into summary.json
  "$PY" - "$OUT" "$start" "${DRY[*]:-}" "$1" <<'EOF'
import json, sys, time
from pathlib import Path
out, start, dry, note = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "--dry-run", sys.argv[4]
order = ["preflight", "parity", "embedded_rl", "engines", "logits_probe", "verl_memory"]
stages = {}
for name in order:
    f = out / "stages" / f"{name}.json"
    stages[name] = json.loads(f.read_text()) if f.is_file() else {"status": "not run"}
ok = all(s.get("status") == "ok" for s in stages.values())
summary = {"status": "ok" if ok else "fail", "dry_run": dry, "note": note, "total_wall_s": round(time.time() - start, 1),
           "stages": stages}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
states = ", ".join(f"{k}={v.get('status')}" for k, v in stages.items())
print(f"summary: {summary['status']} ({states}) -> {out / 'summary.json'}")
EOF
}

if ! command -v "$PY" >/dev/null 2>&1; then
  echo "FAIL: python interpreter '$PY' not found (set PYTHON=...)"
  printf '{"status": "fail", "error": "no interpreter %s"}\n' "$PY" > "$OUT/summary.json"
  exit 1
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  if ! "$PY" -m pip install --no-index --no-deps --target "$OUT/site" "$WHEELS"/*.whl >"$OUT/logs/wheels.log" 2>&1; then
    echo "FAIL: installing the carried wheels from $WHEELS (see $OUT/logs/wheels.log)"
    printf '{"status": "fail", "error": "wheel install failed, see logs/wheels.log"}\n' > "$OUT/summary.json"
    exit 1
  fi
  export PYTHONPATH="$OUT/site:$PYTHONPATH"
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1

run_stage() {  # run_stage NAME SECONDS
  echo "== $1 (limit $2 s)"
  timeout "$2" "$PY" scripts/gpu_evidence.py "$1" "$OUT/stages/$1.json" --work "$OUT/work" "${DRY[@]}" \
      ${ENVACE_EVIDENCE_REQUIRE:+--require-import "$ENVACE_EVIDENCE_REQUIRE"} >"$OUT/logs/$1.log" 2>&1
  local rc=$?
  if [ $rc -eq 124 ]; then
    printf '{"status": "fail", "error": "timed out after %s s"}\n' "$2" > "$OUT/stages/$1.json"
  elif [ ! -f "$OUT/stages/$1.json" ]; then
    printf '{"status": "fail", "error": "exit %s without a result, see logs/%s.log"}\n' "$rc" "$1" > "$OUT/stages/$1.json"
  fi
  tail -3 "$OUT/logs/$1.log"
  return $rc
}

rm -f "$OUT"/stages/*.json
# stage limits add up to 480 s
if ! run_stage preflight 30; then
  summary "preflight failed: no other stage ran"
  exit 1
fi
failed=0
run_stage parity 60 || failed=1
run_stage embedded_rl 90 || failed=1
run_stage engines 90 || failed=1
run_stage logits_probe 30 || failed=1
run_stage verl_memory 180 || failed=1
gzip -f "$OUT/logs/verl_memory.log"
summary "all stages ran"
exit $failed
