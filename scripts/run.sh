#!/usr/bin/env bash
# The main job: install what the nanovllm binary needs, build it alone, and generate text with the
# default model (models/default: a small Qwen3 trained on Jane Austen's novels, committed).
#   scripts/run.sh                       two continuations of Austen-like prompts
#   scripts/run.sh generate|chat|serve|bench|perplexity|tokenize ARGS...   any command on models/default
# Builds into build/run (no tests, benchmarks or Python package: scripts/test.sh builds those), with
# the CUDA backend only when a GPU is visible (nvidia-smi) or NANOVLLM_CUDA=ON is set.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh run
cuda=${NANOVLLM_CUDA:-OFF}
if [ "$cuda" = OFF ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then cuda=AUTO; fi
if [ ! -f build/run/build.ninja ] || [ "$(grep -s '^NANOVLLM_CUDA:' build/run/CMakeCache.txt | cut -d= -f2)" != "$cuda" ]; then
  cmake --preset run -DNANOVLLM_CUDA="$cuda" >/dev/null
fi
cmake --build build/run --target nanovllm_cli -j "$(nproc)" >/dev/null
bin=build/run/nanovllm
model=${NANOVLLM_MODEL:-models/default}
if [ $# -eq 0 ]; then
  set -- generate --prompt "It is a truth universally acknowledged" --prompt "Elizabeth" --max-tokens 48 --seed 0
fi
cmd=$1
shift
exec "$bin" "$cmd" --model "$model" "$@"
