#!/usr/bin/env bash
# The main job: install dependencies, build, make the default model (if absent), and generate.
#   scripts/run.sh                       generate from a text prompt on models/default
#   scripts/run.sh generate|chat|bench|tokenize ARGS...   any nanovllm command on models/default
# models/default is a tiny random-weight Qwen3 (2 layers, hidden 64) with Qwen3's real vocabulary,
# tokenizer and chat template, so text goes in and out (the text is noise: the weights are random).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh release >/dev/null
bin=build/release/nanovllm
model=${NANOVLLM_MODEL:-models/default}
if [ ! -f "$model/config.json" ]; then
  "$bin" make-model --preset tiny --vocab 151936 --seed 0 --out "$model"
fi
if [ $# -eq 0 ]; then
  set -- generate --prompt "The capital of France is" --max-tokens 32 --temperature 0
fi
cmd=$1
shift
exec "$bin" "$cmd" --model "$model" "$@"
