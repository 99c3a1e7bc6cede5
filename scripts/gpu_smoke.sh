#!/usr/bin/env bash
# GPU smoke test of envace on one CUDA machine. Prints what it checked and what it could not.
#
#   bash scripts/gpu_smoke.sh [WORKDIR]          (default WORKDIR: a fresh temporary directory)
#
# Tier 1 (torch + transformers + envace): builds the tiny model, trains the embedded trainer on CUDA
#   for 3 steps, and checks CPU/CUDA parity of the embedded trainer's log-probs (Act rows at T=1.0,
#   Rehearse rows at T=0.01) and of the role-wise GRPO advantages (scripts/gpu_smoke.py).
# Tier 2 (verl + vLLM also installed, see docs/gpu.md): a 2-step verl training of the tiny model through
#   `envace train --backend verl` on a private one-node Ray head that this script starts (its own port and
#   temp dir) and ends by its process group; other Ray clusters of the user are left alone.
# Exit 1: the interpreter or torch is missing (a broken install, not a skip), or a check failed.
# A machine whose torch sees no CUDA device prints "no GPU: skipped" and exits 0 (exit 1 instead with
# ENVACE_REQUIRE_GPU=1, for a job that was meant to run on a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
[ -f scripts/env.sh ] && source scripts/env.sh
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}
ENVACE=("$PY" -m envace.cli)

if ! command -v "$PY" >/dev/null 2>&1; then
  echo "FAIL: python interpreter '$PY' not found (set PYTHON=/path/to/python or create .venv); nothing was checked"
  exit 1
fi
reason=$("$PY" - <<'EOF' 2>&1
import sys
try:
    import torch
except Exception as exc:
    print(f"torch does not import in {sys.executable}: {type(exc).__name__}: {exc}")
    raise SystemExit(3)
if not torch.cuda.is_available():
    print(f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)")
    raise SystemExit(4)
print(torch.cuda.get_device_name(0))
EOF
)
rc=$?
if [ $rc -eq 4 ] && [ "${ENVACE_REQUIRE_GPU:-0}" != 1 ]; then
  echo "no GPU: skipped (${reason##*$'\n'}); nothing was checked"
  exit 0
elif [ $rc -ne 0 ]; then
  echo "FAIL: ${reason##*$'\n'} (exit $rc); nothing was checked"
  exit 1
fi
echo "GPU: $reason"

WORK=${1:-$(mktemp -d -t envace_gpu_smoke.XXXXXX)}
mkdir -p "$WORK"
checked=()
not_checked=()
failed=0
note() { echo "== $*"; }
record() {  # record NAME RC
  if [ "$2" -eq 0 ]; then checked+=("PASS $1"); else checked+=("FAIL $1 (exit $2)"); failed=1; fi
}

note "tiny model -> $WORK/tiny"
"${ENVACE[@]}" model init --out "$WORK/tiny" --corpus-tasks 200 >"$WORK/model_init.log" 2>&1
rc=$?; record "tiny model built" $rc
if [ $rc -ne 0 ]; then tail -20 "$WORK/model_init.log"; fi

if [ $rc -eq 0 ]; then
  note "embedded trainer on CUDA, 3 steps"
  "${ENVACE[@]}" train configs/train/envace.yaml model="$WORK/tiny" out_dir="$WORK/rl" device=cuda steps=3 \
      prompts_per_step=2 k=2 save_every=3 data.n_tasks=20 tracking.enabled=false progress=false \
      rollout.rehearse.temperature=0.01 >"$WORK/train_cuda.log" 2>&1
  r=$?; record "embedded training on CUDA (3 steps, Act 1.0 / Rehearse 0.01)" $r
  tail -12 "$WORK/train_cuda.log"

  note "CPU/CUDA parity"
  "$PY" scripts/gpu_smoke.py parity "$WORK" "$WORK/tiny" 2>&1 | tee "$WORK/parity.log"
  r=${PIPESTATUS[0]}; record "CPU/CUDA parity of log-probs and advantages" $r
fi

if "$PY" -c "import verl, vllm" >/dev/null 2>&1 && [ $rc -eq 0 ]; then
  note "verl + vLLM: 2-step verl training of the tiny model"
  "${ENVACE[@]}" data build --out "$WORK/world" --n-train 64 --n-val 8 --n-test 8 >"$WORK/data.log" 2>&1
  cfg=$("$PY" scripts/gpu_smoke.py verl-config "$WORK" "$WORK/tiny" "$WORK/world/train.parquet")
  port=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  # a private head in its own session: --block keeps it in the foreground, so ending its process group
  # ends this cluster only (a plain `ray stop` would end every Ray process of the user)
  setsid "$PY" -m ray.scripts.scripts start --head --block --port "$port" --num-gpus 1 --disable-usage-stats \
      --temp-dir "$WORK/ray_tmp" >"$WORK/ray.log" 2>&1 &
  ray_pid=$!
  trap 'kill -TERM -- -"$ray_pid" 2>/dev/null' EXIT
  for _ in $(seq 60); do
    "$PY" -c "import ray; ray.init(address='127.0.0.1:$port'); ray.shutdown()" >/dev/null 2>&1 && break
    sleep 2
  done
  RAY_ADDRESS=127.0.0.1:$port timeout 1800 "${ENVACE[@]}" train --backend verl "$cfg" >"$WORK/verl_train.log" 2>&1
  r=$?; record "verl training, 2 steps (envace train --backend verl)" $r
  tail -30 "$WORK/verl_train.log"
  kill -TERM -- -"$ray_pid" 2>/dev/null; wait "$ray_pid" 2>/dev/null; trap - EXIT
else
  not_checked+=("verl training through envace train --backend verl: verl and vLLM are not both importable here (install: docs/gpu.md section 1)")
fi
not_checked+=("multi-node Ray, FSDP sharding over >1 GPU, the LLM judge and the paper-scale config (qwen3_8b_cm2.yaml): need a cluster")

echo
echo "== summary (work dir: $WORK)"
for c in "${checked[@]}"; do echo "checked: $c"; done
for c in "${not_checked[@]}"; do echo "not checked: $c"; done
exit $failed
