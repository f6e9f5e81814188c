#!/usr/bin/env bash
# The main job: install dependencies, build, make the default model (if absent), and generate.
# Usage: scripts/run.sh [nanovllm generate flags...]   (default: a text prompt on models/default)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh release
bin=build/release/nanovllm
model=${NANOVLLM_MODEL:-models/default}
if [ ! -f "$model/config.json" ]; then
  "$bin" make-model --preset tiny --seed 0 --out "$model"
fi
if [ $# -eq 0 ]; then
  set -- --prompt-ids "1,2,3,4,5,6,7,8" --max-tokens 32 --json
fi
exec "$bin" generate --model "$model" "$@"
