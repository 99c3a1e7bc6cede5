#!/usr/bin/env bash
# Set up and run the main job: `envace demo` on the embedded default (tool world, tiny model, SFT,
# EnvACE RL, evaluation, a small TTS sweep and ablation, everything tracked). Arguments go to `envace demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
exec .venv/bin/envace demo "$@"
